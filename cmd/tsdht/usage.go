package main

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/urfave/cli/v2"
)

// Exit statuses of every tsdht command, documented in `tsdht --help` and docs/cli.md.
const (
	exitOK      = 0 // success
	exitFailure = 1 // a runtime failure: unreachable cluster, bad input data, a refused write
	exitUsage   = 2 // the command line itself is wrong: unknown command or flag, missing or bad flag value
	exitPartial = 3 // get --allow-partial printed what it could, some shard had no reachable replica
)

const exitCodesHelp = "EXIT STATUS: 0 ok; 1 runtime failure (unreachable cluster, bad input data, refused write);\n" +
	"2 usage error (unknown command or flag, missing or bad flag value); 3 partial read (get --allow-partial)."

// usageError is a mistake on the command line: main prints it on one line with a pointer to
// the command's help and exits 2.
type usageError struct {
	cmd string // the command's name, "" for the app itself
	msg string
}

func (e *usageError) Error() string { return e.msg }

// usagef returns a usage error of the running command.
func usagef(c *cli.Context, format string, args ...any) error {
	name := ""
	if c != nil && c.Command != nil {
		name = c.Command.Name
	}
	return &usageError{cmd: name, msg: fmt.Sprintf(format, args...)}
}

// badFlag returns a usage error for a flag whose value the command could not use
// ("--every: …"); forgive names the command it came from.
func badFlag(format string, args ...any) error {
	return &usageError{msg: fmt.Errorf(format, args...).Error()}
}

// forgive makes the app's usage errors short: one line naming the mistake, a "did you
// mean" when one is close, a pointer to --help, exit status 2. It replaces urfave/cli's
// required-flag check (which prints the whole help first) with its own.
func forgive(app *cli.App) {
	app.Suggest = true
	app.ExitErrHandler = func(*cli.Context, error) {} // main decides the exit status
	app.OnUsageError = onUsageError
	app.Action = func(c *cli.Context) error {
		if c.Args().Present() {
			name := c.Args().First()
			msg := fmt.Sprintf("unknown command %q", name)
			if s := cli.SuggestCommand(app.Commands, name); s != "" {
				msg += "; " + strings.ToLower(s[:1]) + s[1:] // "Did you mean \"get\"?"
			}
			return &usageError{msg: msg}
		}
		return cli.ShowAppHelp(c)
	}
	app.CommandNotFound = func(c *cli.Context, name string) {
		fmt.Fprintf(c.App.ErrWriter, "tsdht: unknown command %q\n", name)
	}
	// Flags are shared between commands: note every command's required ones first.
	requiredOf := map[*cli.Command][]string{}
	for _, cmd := range app.Commands {
		for _, f := range cmd.Flags {
			if rf, ok := f.(cli.RequiredFlag); ok && rf.IsRequired() {
				requiredOf[cmd] = append(requiredOf[cmd], f.Names()[0])
			}
		}
	}
	for _, cmd := range app.Commands {
		for _, f := range cmd.Flags {
			unrequire(f)
		}
	}
	for _, cmd := range app.Commands {
		cmd.OnUsageError = onUsageError
		if action := cmd.Action; action != nil {
			cmd.Action = func(c *cli.Context) error {
				err := action(c)
				if ue := (*usageError)(nil); errors.As(err, &ue) && ue.cmd == "" {
					ue.cmd = c.Command.Name // a badFlag
				}
				return suggestFor(c, err)
			}
		}
		required := requiredOf[cmd]
		before := cmd.Before
		cmd.Before = func(c *cli.Context) error {
			if err := nonNegative(c); err != nil {
				return err
			}
			var missing []string
			for _, name := range required {
				if !c.IsSet(name) {
					missing = append(missing, "--"+name)
				}
			}
			if len(missing) > 0 {
				return usagef(c, "missing %s", strings.Join(missing, ", "))
			}
			if before != nil {
				return before(c)
			}
			return nil
		}
	}
}

// nonNegative refuses a negative value of any numeric or duration flag given: no
// count, size, rate, quorum, interval or timeout of tsdht is negative (times, which
// can be, are string flags).
func nonNegative(c *cli.Context) error {
	for _, f := range c.Command.Flags {
		name := f.Names()[0]
		if !c.IsSet(name) {
			continue
		}
		neg := false
		switch f.(type) {
		case *cli.IntFlag:
			neg = c.Int(name) < 0
		case *cli.Int64Flag:
			neg = c.Int64(name) < 0
		case *cli.Float64Flag:
			neg = c.Float64(name) < 0
		case *cli.DurationFlag:
			neg = c.Duration(name) < 0
		}
		if neg {
			return usagef(c, "--%s %s: must not be negative", name, c.Value(name))
		}
	}
	return nil
}

// unrequire clears a flag's Required field (the kinds of flag tsdht uses).
func unrequire(f cli.Flag) {
	switch f := f.(type) {
	case *cli.StringFlag:
		f.Required = false
	case *cli.IntFlag:
		f.Required = false
	case *cli.Int64Flag:
		f.Required = false
	case *cli.DurationFlag:
		f.Required = false
	case *cli.BoolFlag:
		f.Required = false
	case *cli.Float64Flag:
		f.Required = false
	case *cli.StringSliceFlag:
		f.Required = false
	}
}

func onUsageError(c *cli.Context, err error, isSubcommand bool) error {
	msg := err.Error()
	var flags []cli.Flag
	if c.Command != nil && c.Command.Name != "" {
		flags = c.Command.Flags
	} else {
		flags = c.App.Flags
	}
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		name = strings.TrimLeft(name, "-")
		msg = fmt.Sprintf("unknown flag --%s", name)
		if s := cli.SuggestFlag(flags, name, false); s != "" {
			msg += fmt.Sprintf("; did you mean %s?", s)
		}
	}
	return usagef(c, "%s", msg)
}

// exit prints err the way tsdht reports errors and returns the exit status.
func exitStatus(w io.Writer, err error) int {
	if err == nil {
		return exitOK
	}
	var ue *usageError
	if errors.As(err, &ue) {
		help := "tsdht --help"
		if ue.cmd != "" {
			help = "tsdht " + ue.cmd + " --help"
		}
		fmt.Fprintf(w, "tsdht: %s (see %s)\n", ue.msg, help)
		return exitUsage
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		if msg := ec.Error(); msg != "" {
			fmt.Fprintln(w, msg)
		}
		return ec.ExitCode()
	}
	fmt.Fprintf(w, "tsdht: %v\n", explainRPCError(err))
	return exitFailure
}

// gossipPortErr matches a client's call to an address that closed the connection on the
// RPC hello without a word: what a memberlist gossip port does with it.
var gossipPortErr = regexp.MustCompile(`to ([^ ]+): rpc: peer unreachable: rpc: handshake: (EOF|read: connection reset by peer)`)

// explainRPCError names the likely mix-up when --cluster was given a gossip address.
func explainRPCError(err error) error {
	m := gossipPortErr.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	return fmt.Errorf("%s does not speak tsdht RPC; it looks like a gossip port? --cluster wants the node's --rpc address (%w)", m[1], err)
}
