package dht

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// IdentityFile is the name of the file, inside the data directory, that
// holds the node's private key.
const IdentityFile = "identity.key"

// ErrIdentityLost is wrapped by LoadOrCreateIdentity's error for a data directory that
// holds a node's data but not its identity file.
var ErrIdentityLost = errors.New("identity file missing from a data directory in use")

// LoadOrCreateIdentity returns the peer ID whose key is kept in dataDir,
// creating an ed25519 key there on first use. The identity decides which
// shards a node owns, so it must survive restarts and power cuts: the key is
// written to a temporary file, synced and renamed into place, and a key file
// that exists but cannot be read is an error, never a reason to make a new
// identity. So is a key file that is missing from a directory that already holds a
// node's data (any subdirectory, such as the store's; loose files such as a pid file
// or a cluster key do not count): that node would otherwise come back as a stranger,
// its shards out of place and its old ID left for dead. AdoptNewIdentity is the
// deliberate way past it.
func LoadOrCreateIdentity(dataDir string) (peer.ID, error) {
	return loadIdentity(dataDir, false)
}

// AdoptNewIdentity is LoadOrCreateIdentity for a data directory that lost its identity
// file on purpose or by accident: it creates a new identity even though the directory
// holds data. It loads the identity file if there is one, so it is harmless to repeat.
func AdoptNewIdentity(dataDir string) (peer.ID, error) {
	return loadIdentity(dataDir, true)
}

func loadIdentity(dataDir string, adopt bool) (peer.ID, error) {
	if dataDir == "" {
		return "", errors.New("dht: identity: no data directory given")
	}
	path := filepath.Join(dataDir, IdentityFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		return identityFromKey(path, b)
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("dht: identity: %w", err)
	}
	if used := dataIn(dataDir); used != "" && !adopt {
		return "", fmt.Errorf("dht: %w: %s is missing, yet %s holds a node's data (%s): put the node's identity.key back "+
			"(from a backup or the old disk) to start it as the node it was, or start it deliberately under a new identity "+
			"as a new node whose data repair hands to the shards' owners",
			ErrIdentityLost, path, dataDir, used)
	}
	sk, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		return "", fmt.Errorf("dht: identity: generating key: %w", err)
	}
	if b, err = crypto.MarshalPrivateKey(sk); err != nil {
		return "", fmt.Errorf("dht: identity: encoding key: %w", err)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", fmt.Errorf("dht: identity: %w", err)
	}
	if err := writeFileAtomic(path, b); err != nil {
		return "", fmt.Errorf("dht: identity: %w", err)
	}
	return peer.IDFromPrivateKey(sk)
}

// identityFromKey decodes a key file's contents into a peer ID.
func identityFromKey(path string, b []byte) (peer.ID, error) {
	sk, err := crypto.UnmarshalPrivateKey(b)
	if err != nil {
		return "", fmt.Errorf("dht: identity file %s is unreadable (%v); "+
			"move it away only if this node is to start over under a new identity", path, err)
	}
	return peer.IDFromPrivateKey(sk)
}

// dataIn names a subdirectory of dir (a node's data: its store), or "" if dir holds
// none or does not exist. lost+found, which a filesystem mounted there brings, is not
// data.
func dataIn(dir string) string {
	es, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	for _, e := range es {
		if e.IsDir() && e.Name() != "lost+found" {
			return e.Name() + "/"
		}
	}
	return ""
}

// writeFileAtomic writes b to path with mode 0600 so that, whenever power is
// lost, path holds either nothing or all of b.
func writeFileAtomic(path string, b []byte) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp*") // mode 0600
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(b); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return err
	}
	// The rename is durable only once the directory entry is.
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
