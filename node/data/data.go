// Package data keeps a node's datasets: files and folders imported into
// UnixFS DAGs (CIDv1, raw leaves, 1 MiB chunks) in the node's own
// datastore and named by their root's CID, so that the same bytes have
// the same name on every node and every block is checked against it. A
// dataset is pinned (kept) or cached: the cache is bounded, and evicts
// the cached datasets least recently used, never one a lease uses.
//
// Blocks are shared: two datasets holding the same chunk hold one block,
// and a block goes only when no dataset kept here links it.
//
// data imports node/clock and the IPFS building blocks (boxo,
// go-datastore); it must never import node, p2p or cmd.
package data

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/ipfs/boxo/blockservice"
	"github.com/ipfs/boxo/blockstore"
	chunker "github.com/ipfs/boxo/chunker"
	"github.com/ipfs/boxo/files"
	"github.com/ipfs/boxo/ipld/merkledag"
	unixfile "github.com/ipfs/boxo/ipld/unixfs/file"
	"github.com/ipfs/boxo/ipld/unixfs/importer/balanced"
	ih "github.com/ipfs/boxo/ipld/unixfs/importer/helpers"
	ufsio "github.com/ipfs/boxo/ipld/unixfs/io"
	"github.com/ipfs/go-cid"
	ds "github.com/ipfs/go-datastore"
	"github.com/ipfs/go-datastore/namespace"
	"github.com/ipfs/go-datastore/query"
	format "github.com/ipfs/go-ipld-format"
	mh "github.com/multiformats/go-multihash"
)

// The DAG's shape: every node imports a path to the same CID.
const (
	ChunkBytes = 1 << 20 // a leaf's bytes
	MaxLinks   = 1024    // links of one interior node
)

// Prefix is the CIDs' form: CIDv1, dag-pb interior nodes, SHA-256.
var Prefix = cid.Prefix{Version: 1, Codec: cid.DagProtobuf, MhType: mh.SHA2_256, MhLength: -1}

// Errors of the store.
var (
	ErrNotFound = errors.New("no such dataset here")
	ErrInUse    = errors.New("the dataset is in use by a lease")
	ErrTooBig   = errors.New("the dataset is larger than the cache")
	// ErrOnlyFiles refuses a symbolic link, a device or a pipe.
	ErrOnlyFiles = errors.New("a dataset holds only files and folders")
)

// Dataset is what the store keeps of one dataset.
type Dataset struct {
	CID    string `json:"cid"`
	Name   string `json:"name"`   // the base name of the path imported
	Bytes  int64  `json:"bytes"`  // its blocks' bytes, shared ones counted
	Blocks int    `json:"blocks"` // its blocks
	Pinned bool   `json:"pinned"`
	Added  int64  `json:"added_ms"`
	Used   int64  `json:"used_ms"` // last added, pinned or used by a lease
	// Encrypted: its one file is a tar encrypted under Key, an age
	// identity that never leaves this node but sealed to a provider.
	Encrypted bool   `json:"encrypted,omitempty"`
	Key       string `json:"key,omitempty"`
}

var indexPrefix = ds.NewKey("/datasets")

// Store is a node's datasets: blocks under /data of its datastore, the
// index of datasets under /datasets. Safe for concurrent use.
type Store struct {
	d     ds.Batching
	bs    blockstore.Blockstore
	dag   format.DAGService
	clock clock.Clock
	limit int64

	mu    sync.Mutex // serialises changes to the index and the blocks
	inUse map[string]int
}

// Open returns the store of datasets kept in d, whose cached (unpinned)
// and pinned datasets together are held to limit bytes by evicting the
// cached ones least recently used.
func Open(d ds.Batching, limit int64, clk clock.Clock) *Store {
	bs := blockstore.NewBlockstore(namespace.Wrap(d, ds.NewKey("/data")))
	return &Store{
		d: d, bs: bs, dag: merkledag.NewDAGService(blockservice.New(bs, nil)),
		clock: clock.Or(clk), limit: limit, inUse: map[string]int{},
	}
}

// Limit is the bytes the datasets kept here may hold.
func (s *Store) Limit() int64 { return s.limit }

// Blockstore is where the datasets' blocks are, for an exchange to serve
// and fill.
func (s *Store) Blockstore() blockstore.Blockstore { return s.bs }

// Add imports the file or folder at path as a dataset, pinned or not,
// and returns it. A symbolic link, or anything but files and folders, is
// refused; so is a path whose files hold more than the cache's bound.
// Adding what is kept already returns it, used now (and pinned, if asked).
func (s *Store) Add(ctx context.Context, path string, pin bool) (Dataset, error) {
	st, err := s.fits(path)
	if err != nil {
		return Dataset{}, err
	}
	f, err := files.NewSerialFile(path, false, st)
	if err != nil {
		return Dataset{}, err
	}
	defer f.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	root, err := importNode(ctx, s.dag, f)
	if err != nil {
		return Dataset{}, fmt.Errorf("import %s: %w", path, err)
	}
	now := s.clock.Now().UnixMilli()
	d, err := s.get(ctx, root.Cid())
	switch {
	case err == nil:
		d.Pinned, d.Used = d.Pinned || pin, now
	case errors.Is(err, ErrNotFound):
		d = Dataset{CID: root.Cid().String(), Name: filepath.Base(path), Pinned: pin, Added: now, Used: now}
		if d.Blocks, d.Bytes, err = s.walk(ctx, root.Cid(), nil); err != nil {
			return Dataset{}, err
		}
	default:
		return Dataset{}, err
	}
	if err := s.put(ctx, d); err != nil {
		return Dataset{}, err
	}
	return d, s.evict(ctx, d.CID)
}

// fits checks that path holds only files and folders, no more bytes of
// them than the cache's bound, and returns what it is.
func (s *Store) fits(path string) (fs.FileInfo, error) {
	st, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	size, err := treeSize(path)
	if err != nil {
		return nil, err
	}
	if size > s.limit {
		return nil, fmt.Errorf("%s holds %d bytes, datasets.cache_gib allows %d: %w", path, size, s.limit, ErrTooBig)
	}
	return st, nil
}

// treeSize is the bytes of the regular files under path; a symbolic
// link or anything but a file or folder is an error naming it.
func treeSize(path string) (int64, error) {
	var n int64
	err := filepath.WalkDir(path, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch t := e.Type(); {
		case t.IsDir():
		case t.IsRegular():
			i, err := e.Info()
			if err != nil {
				return err
			}
			n += i.Size()
		default:
			return fmt.Errorf("%s: a %s; %w", p, kind(t), ErrOnlyFiles)
		}
		return nil
	})
	return n, err
}

func kind(t fs.FileMode) string {
	if t&fs.ModeSymlink != 0 {
		return "symbolic link"
	}
	return "special file"
}

// importNode imports a file, or a folder and everything in it.
func importNode(ctx context.Context, dag format.DAGService, n files.Node) (format.Node, error) {
	switch n := n.(type) {
	case files.File:
		return importFile(ctx, dag, n)
	case files.Directory:
		dir, err := ufsio.NewDirectory(dag, ufsio.WithCidBuilder(Prefix), ufsio.WithSizeEstimationMode(ufsio.SizeEstimationBlock))
		if err != nil {
			return nil, err
		}
		it := n.Entries()
		for it.Next() {
			child, err := importNode(ctx, dag, it.Node())
			if err != nil {
				return nil, fmt.Errorf("%s: %w", it.Name(), err)
			}
			if err := dir.AddChild(ctx, it.Name(), child); err != nil {
				return nil, err
			}
		}
		if err := it.Err(); err != nil {
			return nil, err
		}
		nd, err := dir.GetNode()
		if err != nil {
			return nil, err
		}
		return nd, dag.Add(ctx, nd)
	}
	return nil, fmt.Errorf("a %T: %w", n, ErrOnlyFiles)
}

func importFile(ctx context.Context, dag format.DAGService, r io.Reader) (format.Node, error) {
	bd := format.NewBufferedDAG(ctx, dag)
	p := ih.DagBuilderParams{Dagserv: bd, Maxlinks: MaxLinks, RawLeaves: true, CidBuilder: Prefix}
	db, err := p.New(chunker.NewSizeSplitter(r, ChunkBytes))
	if err != nil {
		return nil, err
	}
	nd, err := balanced.Layout(db)
	if err != nil {
		return nil, err
	}
	return nd, bd.Commit()
}

// walk visits each block of the DAG at root once, calling visit (when
// not nil) with it, and counts them and their bytes. A block missing
// here is an error.
func (s *Store) walk(ctx context.Context, root cid.Cid, visit func(cid.Cid)) (blocks int, bytes int64, err error) {
	links := func(ctx context.Context, c cid.Cid) ([]*format.Link, error) {
		if c.Type() == cid.Raw {
			return nil, nil
		}
		return merkledag.GetLinksDirect(s.dag)(ctx, c)
	}
	var serr error
	err = merkledag.Walk(ctx, links, root, func(c cid.Cid) bool {
		n, err := s.bs.GetSize(ctx, c)
		if err != nil {
			serr = err
			return false
		}
		blocks, bytes = blocks+1, bytes+int64(n)
		if visit != nil {
			visit(c)
		}
		return true
	})
	return blocks, bytes, errors.Join(err, serr)
}

// List returns the datasets kept here, least recently used first.
func (s *Store) List(ctx context.Context) ([]Dataset, error) {
	res, err := s.d.Query(ctx, query.Query{Prefix: indexPrefix.String()})
	if err != nil {
		return nil, err
	}
	defer res.Close()
	var out []Dataset
	for e := range res.Next() {
		if e.Error != nil {
			return nil, e.Error
		}
		var d Dataset
		if err := json.Unmarshal(e.Value, &d); err != nil {
			return nil, fmt.Errorf("dataset record %s: %w", e.Key, err)
		}
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b Dataset) int {
		return cmp.Or(cmp.Compare(a.Used, b.Used), strings.Compare(a.CID, b.CID))
	})
	return out, nil
}

// Get returns the dataset c; ErrNotFound when it is not kept here.
func (s *Store) Get(ctx context.Context, c cid.Cid) (Dataset, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.get(ctx, c)
}

func (s *Store) get(ctx context.Context, c cid.Cid) (Dataset, error) {
	b, err := s.d.Get(ctx, indexPrefix.ChildString(c.String()))
	if errors.Is(err, ds.ErrNotFound) {
		return Dataset{}, fmt.Errorf("%s: %w", c, ErrNotFound)
	}
	if err != nil {
		return Dataset{}, err
	}
	var d Dataset
	if err := json.Unmarshal(b, &d); err != nil {
		return Dataset{}, fmt.Errorf("dataset record %s: %w", c, err)
	}
	return d, nil
}

func (s *Store) put(ctx context.Context, d Dataset) error {
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	return s.d.Put(ctx, indexPrefix.ChildString(d.CID), b)
}

// Pin keeps the dataset c whatever the cache's bound (pin), or returns
// it to the cache (not pin), where it may be evicted.
func (s *Store) Pin(ctx context.Context, c cid.Cid, pin bool) (Dataset, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, err := s.get(ctx, c)
	if err != nil {
		return Dataset{}, err
	}
	d.Pinned = pin
	if err := s.put(ctx, d); err != nil {
		return Dataset{}, err
	}
	if pin {
		return d, nil
	}
	return d, s.evict(ctx, "")
}

// Use marks the dataset c in use by a lease until release is called:
// it is neither evicted nor removed meanwhile, and counts as used now.
func (s *Store) Use(ctx context.Context, c cid.Cid) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, err := s.get(ctx, c)
	if err != nil {
		return nil, err
	}
	d.Used = s.clock.Now().UnixMilli()
	if err := s.put(ctx, d); err != nil {
		return nil, err
	}
	s.inUse[d.CID]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.inUse[d.CID]--; s.inUse[d.CID] <= 0 {
				delete(s.inUse, d.CID)
			}
		})
	}, nil
}

// Remove removes the dataset c, pinned or not, and the blocks no other
// dataset kept here links, and returns what it was; one in use by a
// lease is refused (ErrInUse).
func (s *Store) Remove(ctx context.Context, c cid.Cid) (Dataset, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, err := s.get(ctx, c)
	if err != nil {
		return Dataset{}, err
	}
	if s.inUse[d.CID] > 0 {
		return Dataset{}, fmt.Errorf("%s: %w", c, ErrInUse)
	}
	return d, s.remove(ctx, c)
}

// keptBlocks is the set of the blocks (by multihash) the datasets kept
// here link, but not those only dataset but links: all of them, or those
// of all when given. Under mu.
func (s *Store) keptBlocks(ctx context.Context, but string, all ...Dataset) (map[string]bool, error) {
	if all == nil {
		var err error
		if all, err = s.List(ctx); err != nil {
			return nil, err
		}
	}
	kept := map[string]bool{}
	for _, d := range all {
		if d.CID == but {
			continue
		}
		other, err := cid.Decode(d.CID)
		if err != nil {
			return nil, err
		}
		if _, _, err := s.walk(ctx, other, func(b cid.Cid) { kept[string(b.Hash())] = true }); err != nil {
			return nil, fmt.Errorf("dataset %s: %w", d.CID, err)
		}
	}
	return kept, nil
}

// remove drops c from the index, then the blocks only it linked. Under mu.
func (s *Store) remove(ctx context.Context, c cid.Cid) error {
	all, err := s.List(ctx)
	if err != nil {
		return err
	}
	if err := s.d.Delete(ctx, indexPrefix.ChildString(c.String())); err != nil {
		return err
	}
	kept, err := s.keptBlocks(ctx, c.String(), all...)
	if err != nil {
		return err
	}
	var gone []cid.Cid
	if _, _, err := s.walk(ctx, c, func(b cid.Cid) {
		if !kept[string(b.Hash())] {
			gone = append(gone, b)
		}
	}); err != nil {
		return err
	}
	for _, b := range gone {
		if err := s.bs.DeleteBlock(ctx, b); err != nil {
			return err
		}
	}
	return nil
}

// evict removes cached datasets, least recently used first, until the
// datasets kept hold at most the store's bound: never a pinned one, one
// in use, or keep (the one just added). Under mu.
func (s *Store) evict(ctx context.Context, keep string) error {
	all, err := s.List(ctx)
	if err != nil {
		return err
	}
	var total int64
	for _, d := range all {
		total += d.Bytes
	}
	for _, d := range all {
		if total <= s.limit {
			break
		}
		if d.Pinned || d.CID == keep || s.inUse[d.CID] > 0 {
			continue
		}
		c, err := cid.Decode(d.CID)
		if err != nil {
			return err
		}
		if err := s.remove(ctx, c); err != nil {
			return err
		}
		total -= d.Bytes
	}
	return nil
}

// Export writes the dataset c at dest (a file, or a folder and what it
// holds), reading every block from this store, each checked against its
// CID.
func (s *Store) Export(ctx context.Context, c cid.Cid, dest string) error {
	vdag := merkledag.NewDAGService(blockservice.New(&blockstore.ValidatingBlockstore{Blockstore: s.bs}, nil))
	root, err := vdag.Get(ctx, c)
	if err != nil {
		return err
	}
	n, err := unixfile.NewUnixfsFile(ctx, vdag, root)
	if err != nil {
		return err
	}
	defer n.Close()
	// A DAG may name links; a dataset holds only files and folders.
	if err := files.Walk(n, func(p string, n files.Node) error {
		if _, ok := n.(*files.Symlink); ok {
			return fmt.Errorf("%s: a symbolic link; %w", p, ErrOnlyFiles)
		}
		return nil
	}); err != nil {
		return err
	}
	return files.WriteTo(n, dest)
}

// keep indexes root, fetched whole, as a cached dataset used now, and
// makes room for it.
func (s *Store) keep(ctx context.Context, root cid.Cid) (Dataset, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d, err := s.get(ctx, root); err == nil {
		return d, nil
	}
	now := s.clock.Now().UnixMilli()
	d := Dataset{CID: root.String(), Name: root.String(), Added: now, Used: now}
	var err error
	if d.Blocks, d.Bytes, err = s.walk(ctx, root, nil); err != nil {
		return Dataset{}, fmt.Errorf("dataset %s fetched, but not whole here: %w", root, err)
	}
	if err := s.put(ctx, d); err != nil {
		return Dataset{}, err
	}
	return d, s.evict(ctx, d.CID)
}

// dropUnlinked removes those of blocks that no dataset kept here links.
func (s *Store) dropUnlinked(ctx context.Context, blocks []cid.Cid) error {
	if len(blocks) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	kept, err := s.keptBlocks(ctx, "")
	if err != nil {
		return err
	}
	for _, b := range blocks {
		if !kept[string(b.Hash())] {
			if err := s.bs.DeleteBlock(ctx, b); err != nil {
				return err
			}
		}
	}
	return nil
}

// Stage writes the dataset c at dest for a job to read, as Export does,
// replacing what is there, and takes write permission off every file: a
// job reads it, never writes it.
func (s *Store) Stage(ctx context.Context, c cid.Cid, dest string) error {
	if err := os.RemoveAll(dest); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return err
	}
	if err := s.Export(ctx, c, dest); err != nil {
		return err
	}
	return filepath.WalkDir(dest, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			return os.Chmod(p, 0o755)
		}
		return os.Chmod(p, 0o444)
	})
}
