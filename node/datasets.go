package node

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/data"
	"github.com/idlegrid/idlegrid/node/fault"
	"github.com/ipfs/go-cid"
)

// datasetAPI answers api.Records' dataset methods from a store of
// datasets (node/data): a node's once it has opened its datastore, or a
// repository's with no daemon running (Records).
type datasetAPI struct{ data *data.Store }

func (a datasetAPI) store() (*data.Store, error) {
	if a.data == nil {
		return nil, fault.Unavailablef("the node's datastore is not open")
	}
	return a.data, nil
}

// AddDataset imports the file or folder at req.Path, an absolute path of
// this machine.
func (a datasetAPI) AddDataset(ctx context.Context, req api.DatasetAdd) (api.DatasetView, error) {
	s, err := a.store()
	if err != nil {
		return api.DatasetView{}, err
	}
	if !filepath.IsAbs(req.Path) {
		return api.DatasetView{}, fault.Fieldf("path", req.Path, "an absolute path of a file or folder on the node's machine")
	}
	d, err := s.Add(ctx, req.Path, req.Pin)
	if err != nil {
		return api.DatasetView{}, datasetFault(err)
	}
	return datasetView(d), nil
}

// Datasets lists the datasets kept, least recently used first.
func (a datasetAPI) Datasets(ctx context.Context) ([]api.DatasetView, error) {
	s, err := a.store()
	if err != nil {
		return nil, err
	}
	ds, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]api.DatasetView, 0, len(ds))
	for _, d := range ds {
		out = append(out, datasetView(d))
	}
	return out, nil
}

// PinDataset pins or unpins the dataset named by its CID.
func (a datasetAPI) PinDataset(ctx context.Context, id string, pin bool) (api.DatasetView, error) {
	s, c, err := a.named(id)
	if err != nil {
		return api.DatasetView{}, err
	}
	d, err := s.Pin(ctx, c, pin)
	if err != nil {
		return api.DatasetView{}, datasetFault(err)
	}
	return datasetView(d), nil
}

// RemoveDataset removes the dataset named by its CID, and returns it.
func (a datasetAPI) RemoveDataset(ctx context.Context, id string) (api.DatasetView, error) {
	s, c, err := a.named(id)
	if err != nil {
		return api.DatasetView{}, err
	}
	d, err := s.Remove(ctx, c)
	if err != nil {
		return api.DatasetView{}, datasetFault(err)
	}
	return datasetView(d), nil
}

// named is the store and the CID id names.
func (a datasetAPI) named(id string) (*data.Store, cid.Cid, error) {
	s, err := a.store()
	if err != nil {
		return nil, cid.Undef, err
	}
	c, err := cid.Decode(id)
	if err != nil {
		return nil, cid.Undef, fault.Fieldf("cid", id, "a dataset's CID, as idlegrid dataset ls prints it (bafy…)")
	}
	return s, c, nil
}

// datasetFault gives err of the dataset store its kind: the request's
// (a path that is no dataset, a dataset not kept, one in use) or, of no
// kind, the node's own.
func datasetFault(err error) error {
	switch {
	case errors.Is(err, data.ErrNotFound):
		return fault.Mark(fault.ErrNotFound, err)
	case errors.Is(err, data.ErrInUse):
		return fault.Mark(fault.ErrConflict, err)
	case errors.Is(err, data.ErrTooBig), errors.Is(err, data.ErrOnlyFiles), errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission):
		return fault.Invalid(err)
	}
	return err
}

func datasetView(d data.Dataset) api.DatasetView {
	return api.DatasetView{
		CID: d.CID, Name: d.Name, Bytes: d.Bytes, Blocks: d.Blocks, Pinned: d.Pinned,
		Added: time.UnixMilli(d.Added).UTC(), Used: time.UnixMilli(d.Used).UTC(),
	}
}
