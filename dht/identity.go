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

// LoadOrCreateIdentity returns the peer ID whose key is kept in dataDir,
// creating an ed25519 key there on first use. The identity decides which
// shards a node owns, so it must survive restarts and power cuts: the key is
// written to a temporary file, synced and renamed into place, and a key file
// that exists but cannot be read is an error, never a reason to make a new
// identity.
func LoadOrCreateIdentity(dataDir string) (peer.ID, error) {
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
