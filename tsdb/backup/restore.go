package backup

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// Summary is what Verify found, or Restore wrote.
type Summary struct {
	Cut     int64 // the latest run's cut (ns)
	Series  int
	Files   int
	Blocks  int
	Points  int64
	Bytes   int64 // of data files
	Seconds float64
	// Warnings name what was restored only in part (a series without points whose
	// catalog entry the cluster would not take alone).
	Warnings []string
}

// Verify checks a backup without restoring it: the manifest against its checksum, and
// every data file against its size and SHA-256, block by block against the manifest.
// The error names the first damaged file.
func Verify(dir string) (Summary, error) {
	began := time.Now()
	m, err := readManifest(dir)
	if err != nil {
		return Summary{}, err
	}
	return verify(dir, m, began)
}

func verify(dir string, m *Manifest, began time.Time) (Summary, error) {
	s := Summary{Series: len(m.Series), Files: len(m.Files)}
	if len(m.Runs) > 0 {
		s.Cut = m.Runs[len(m.Runs)-1].Cut
	}
	want := map[string]map[int64]blockRef{} // file → offset → what the manifest says lies there
	for _, si := range m.Series {
		for _, b := range si.Blocks {
			if want[b.File] == nil {
				want[b.File] = map[int64]blockRef{}
			}
			want[b.File][b.Offset] = blockRef{key: si.Key, quantum: si.Quantum, BlockEntry: b}
			s.Blocks++
			s.Points += b.Points
		}
	}
	for _, f := range m.Files {
		if err := verifyFile(dir, f, want[f.Name]); err != nil {
			return s, fmt.Errorf("%s: %w", filepath.Join(dir, f.Name), err)
		}
		s.Bytes += f.Size
	}
	s.Seconds = time.Since(began).Seconds()
	return s, nil
}

// blockRef is a manifest's block with its series.
type blockRef struct {
	key     string
	quantum int64
	BlockEntry
}

// verifyFile checks one data file: size, SHA-256, header, and that each block the
// manifest places in it is there, whole, and what the manifest says.
func verifyFile(dir string, fe FileEntry, want map[int64]blockRef) error {
	f, err := os.Open(filepath.Join(dir, fe.Name))
	if err != nil {
		return fmt.Errorf("cannot read it: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() != fe.Size {
		return fmt.Errorf("%d bytes, the manifest records %d: the file is damaged or truncated", st.Size(), fe.Size)
	}
	h := sha256.New()
	r := bufio.NewReaderSize(io.TeeReader(f, h), 1<<20)
	hdr := make([]byte, headerLen)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return fmt.Errorf("header: %w", err)
	}
	if err := checkFileHeader(hdr); err != nil {
		return err
	}
	off := int64(headerLen)
	seen := 0
	for {
		b, n, err := readBlock(r)
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("at byte %d: %w", off, err)
		}
		if w, ok := want[off]; ok {
			if w.key != b.Key || w.Start != b.Start || w.quantum != b.Quantum || w.From != b.From || w.To != b.To ||
				w.Points != int64(b.Points.Len()) || w.Length != int64(n) {
				return fmt.Errorf("at byte %d: a block of %q at quantum %d with %d points; the manifest records %q at %d with %d", off, b.Key, b.Start, b.Points.Len(), w.key, w.Start, w.Points)
			}
			seen++
		}
		off += int64(n)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != fe.SHA256 {
		return fmt.Errorf("SHA-256 %s, the manifest records %s: the file is damaged", got, fe.SHA256)
	}
	if seen != len(want) {
		return fmt.Errorf("%d of the %d blocks the manifest places in it start where it says", seen, len(want))
	}
	return nil
}

// RestoreOptions configure a restore.
type RestoreOptions struct {
	// Concurrency is how many series are written at once (0: DefaultConcurrency).
	Concurrency int
	// WriteQuorum overrides the cluster's write quorum (0: its default).
	WriteQuorum int
}

// restoreBatch is how many points one put of a restore carries.
const restoreBatch = 50_000

// Restore writes the backup in dir into c: every series with its recorded type and
// quantum, its points, and its catalog metadata. It verifies the whole backup first and
// writes nothing when any file is damaged. The cluster places every shard by its own
// IDs, replication factor and ID format; points already there are overwritten with the
// same values, so a restore interrupted can be run again.
func Restore(ctx context.Context, c Cluster, dir string, o RestoreOptions) (Summary, error) {
	began := time.Now()
	m, err := readManifest(dir)
	if err != nil {
		return Summary{}, err
	}
	s, err := verify(dir, m, began)
	if err != nil {
		return s, fmt.Errorf("%w; nothing was restored", err)
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	warn := make([]string, len(m.Series))
	errs := forEach(ctx, len(m.Series), o.Concurrency, func(i int) (err error) {
		warn[i], err = restoreSeries(ctx, c, dir, &m.Series[i], o)
		if err != nil {
			err = fmt.Errorf("series %q: %w", m.Series[i].Key, err)
		}
		return err
	})
	for _, w := range warn {
		if w != "" {
			s.Warnings = append(s.Warnings, w)
		}
	}
	s.Seconds = time.Since(began).Seconds()
	if err := errors.Join(errs...); err != nil {
		return s, fmt.Errorf("restore: %w; the series named were restored in part: run the restore again", err)
	}
	return s, nil
}

// restoreSeries writes one series' points, block by block in batches, then its
// metadata.
func restoreSeries(ctx context.Context, c Cluster, dir string, si *SeriesInfo, o RestoreOptions) (string, error) {
	typ, _ := parseType(si.Type) // checked by readManifest
	opt := wire.PutOptions{WriteQuorum: o.WriteQuorum, Quantum: quanta.Quantum(si.Quantum)}
	files := map[string]*os.File{}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	batch := series.Points{Type: typ}
	flush := func() error {
		if batch.Len() == 0 {
			return nil
		}
		n, err := c.Put(ctx, si.Key, batch, opt)
		if err != nil {
			return err
		}
		if n != batch.Len() {
			return fmt.Errorf("the cluster stored %d of %d points", n, batch.Len())
		}
		batch = series.Points{Type: typ}
		return nil
	}
	for _, be := range si.Blocks {
		f := files[be.File]
		if f == nil {
			var err error
			if f, err = os.Open(filepath.Join(dir, be.File)); err != nil {
				return "", err
			}
			files[be.File] = f
		}
		b, _, err := readBlock(bufio.NewReader(io.NewSectionReader(f, be.Offset, be.Length)))
		if err != nil {
			return "", fmt.Errorf("%s at byte %d: %w", filepath.Join(dir, be.File), be.Offset, err)
		}
		if b.Points.Type != typ && b.Points.Len() > 0 {
			return "", fmt.Errorf("%s at byte %d: %s points; the manifest says %s", filepath.Join(dir, be.File), be.Offset, b.Points.Type, typ)
		}
		for i := 0; i < b.Points.Len(); i++ {
			batch.AppendFrom(&b.Points, i)
		}
		if batch.Len() >= restoreBatch {
			if err := flush(); err != nil {
				return "", err
			}
		}
	}
	if err := flush(); err != nil {
		return "", err
	}
	if si.Unit == "" && si.Description == "" && len(si.Tags) == 0 && si.NominalRate == 0 {
		return "", nil
	}
	req := wire.MetaReq{Key: si.Key, Unit: si.Unit, SetUnit: true, Description: si.Description, SetDescription: true,
		NominalRate: si.NominalRate, SetRate: si.NominalRate != 0, SetTags: true}
	for _, t := range si.Tags {
		req.Pairs = append(req.Pairs, t.K, t.V)
	}
	if _, err := c.Meta(ctx, req); err != nil {
		if len(si.Blocks) == 0 {
			return fmt.Sprintf("series %q has no points in the backup and its catalog entry was not taken alone: %v", si.Key, err), nil
		}
		return "", fmt.Errorf("catalog entry: %w", err)
	}
	return "", nil
}
