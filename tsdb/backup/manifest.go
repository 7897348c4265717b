package backup

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
)

// ManifestName and SumName are the manifest and its checksum in a backup directory;
// data files live under DataDir.
const (
	ManifestName = "MANIFEST.json"
	SumName      = "MANIFEST.sha256" // `sha256sum -c` reads it
	DataDir      = "data"
	formatName   = "tsdht-backup"
)

// Manifest says what a backup holds: which file covers which series and quantum, with
// how many points and what checksum, the catalog of every series, and the runs that
// wrote it.
type Manifest struct {
	Format    string       `json:"format"`  // "tsdht-backup"
	Version   int          `json:"version"` // FormatVersion
	Selection Selection    `json:"selection"`
	Runs      []Run        `json:"runs"`
	Files     []FileEntry  `json:"files"`
	Series    []SeriesInfo `json:"series"`
}

// Selection is which series a backup holds: every series carrying the Match tags
// whose key starts with Prefix.
type Selection struct {
	Prefix string   `json:"prefix,omitempty"`
	Match  []string `json:"match,omitempty"` // "k=v"
}

// Run is one backup run into the directory.
type Run struct {
	Number int   `json:"run"`
	Cut    int64 `json:"cut"` // ns: every point acknowledged before it, within [From, To), is in
	// CutTime is Cut in RFC 3339, for a person.
	CutTime string  `json:"cut_time"`
	From    int64   `json:"from"` // ns
	To      int64   `json:"to"`   // ns, never after Cut
	Seconds float64 `json:"seconds"`
	// Series listed; Blocks written (new or changed quanta) and kept (unchanged);
	// Points and Bytes written.
	Series  int `json:"series"`
	Written int `json:"blocks_written"`
	Kept    int `json:"blocks_kept"`
	Dropped int `json:"blocks_dropped"`
	// Skipped counts listed series with no type: deleted since they were listed, or
	// catalog entries of series never written.
	Skipped    int      `json:"series_skipped,omitempty"`
	Points     int64    `json:"points_written"`
	Bytes      int64    `json:"bytes_written"`
	PointsHeld int64    `json:"points_held"`
	Files      []string `json:"files,omitempty"` // data files this run wrote
}

// FileEntry is one data file: its path under the backup directory, size and SHA-256.
type FileEntry struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// SeriesInfo is one series: its catalog entry as the backup restores it, and its blocks
// in time order.
type SeriesInfo struct {
	Key         string        `json:"key"`
	Type        string        `json:"type"`      // float, int or string
	Quantum     int64         `json:"quantum_s"` // the series' quantum length, seconds
	Unit        string        `json:"unit,omitempty"`
	Description string        `json:"description,omitempty"`
	Tags        []catalog.Tag `json:"tags,omitempty"`
	NominalRate float64       `json:"nominal_rate,omitempty"`
	Blocks      []BlockEntry  `json:"blocks"`
}

// BlockEntry is where one block lives and what it covers.
type BlockEntry struct {
	Start  int64  `json:"start"` // quantum start, UNIX seconds
	From   int64  `json:"from"`  // ns
	To     int64  `json:"to"`    // ns
	Points int64  `json:"points"`
	File   string `json:"file"`
	Offset int64  `json:"offset"`
	Length int64  `json:"length"`
	// Fingerprint is what the cluster's statistics said of the quantum when it was
	// read (fingerprint): an incremental run re-reads the quantum when it differs.
	Fingerprint string `json:"fingerprint"`
	// Content is the SHA-256 (first 16 bytes, hex) of the block's bytes in its file: a
	// full run (Options.Full) keeps the block when a fresh read encodes the same.
	Content string `json:"content"`
}

// parseType returns the series type a manifest names.
func parseType(s string) (series.Type, error) {
	for _, t := range []series.Type{series.Float, series.Int, series.String} {
		if t.String() == s {
			return t, nil
		}
	}
	return series.Unknown, fmt.Errorf("unknown value type %q (float, int or string)", s)
}

// ErrNoBackup is returned when a directory holds no manifest.
var ErrNoBackup = errors.New("no backup here")

// readManifest reads and checks the manifest of dir: its checksum first, then its form.
func readManifest(dir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w (no %s)", dir, ErrNoBackup, ManifestName)
	}
	if err != nil {
		return nil, err
	}
	sum, err := os.ReadFile(filepath.Join(dir, SumName))
	if err != nil {
		return nil, fmt.Errorf("%s: the manifest's checksum file: %w", filepath.Join(dir, SumName), err)
	}
	want, _, _ := strings.Cut(strings.TrimSpace(string(sum)), " ")
	if got := sha256Hex(b); got != want {
		return nil, fmt.Errorf("%s: SHA-256 %s, %s records %s: the manifest is damaged", filepath.Join(dir, ManifestName), got, SumName, want)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %v", filepath.Join(dir, ManifestName), err)
	}
	if m.Format != formatName {
		return nil, fmt.Errorf("%s: format %q, not %q", filepath.Join(dir, ManifestName), m.Format, formatName)
	}
	if m.Version != FormatVersion {
		return nil, fmt.Errorf("%s: format version %d; this build reads version %d: use the tsdht that wrote it", filepath.Join(dir, ManifestName), m.Version, FormatVersion)
	}
	return &m, m.check()
}

// check verifies that every block names a file the manifest lists, inside its size,
// and that every series' type parses.
func (m *Manifest) check() error {
	files := map[string]int64{}
	for _, f := range m.Files {
		if !validFileName(f.Name) {
			return fmt.Errorf("manifest: file name %q: not a data file of a backup", f.Name)
		}
		files[f.Name] = f.Size
	}
	for _, s := range m.Series {
		if _, err := parseType(s.Type); err != nil {
			return fmt.Errorf("manifest: series %q: %v", s.Key, err)
		}
		if s.Quantum < 1 {
			return fmt.Errorf("manifest: series %q: quantum %d s", s.Key, s.Quantum)
		}
		for _, b := range s.Blocks {
			size, ok := files[b.File]
			if !ok {
				return fmt.Errorf("manifest: series %q, quantum %d: file %q is not listed", s.Key, b.Start, b.File)
			}
			if b.Offset < int64(headerLen) || b.Length < 1 || b.Offset+b.Length > size {
				return fmt.Errorf("manifest: series %q, quantum %d: bytes [%d, +%d) lie outside %s (%d bytes)", s.Key, b.Start, b.Offset, b.Length, b.File, size)
			}
		}
	}
	return nil
}

// validFileName accepts the names Backup gives data files: data/<name> with no path
// tricks.
func validFileName(name string) bool {
	dir, base := filepath.Split(name)
	return dir == DataDir+"/" && base != "" && base != "." && base != ".." && !strings.ContainsAny(base, `/\`)
}

// writeManifest writes the manifest and then its checksum, each through a temporary
// file renamed into place after it is synced.
func writeManifest(dir string, m *Manifest) error {
	b, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if err := writeAtomic(filepath.Join(dir, ManifestName), b); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, SumName), []byte(sha256Hex(b)+"  "+ManifestName+"\n"))
}

func writeAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// syncDir makes a rename in dir, and the files created in it, survive a power cut.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
