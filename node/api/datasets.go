package api

import (
	"context"
	"net/url"
	"time"
)

// DatasetView is one dataset a node keeps, as `idlegrid dataset ls`
// shows it.
type DatasetView struct {
	CID    string    `json:"cid"`
	Name   string    `json:"name"`   // the base name of the path imported
	Bytes  int64     `json:"bytes"`  // its blocks' bytes
	Blocks int       `json:"blocks"` // its blocks
	Pinned bool      `json:"pinned"` // kept whatever the cache's bound
	Added  time.Time `json:"added"`
	Used   time.Time `json:"used"` // last added, pinned or used by a lease
	// Encrypted: one tar, encrypted with age before it was hashed; its
	// key never leaves the node but sealed to a lease's provider.
	Encrypted bool `json:"encrypted,omitempty"`
}

// DatasetAdd is the body of POST /v1/datasets: a file or folder of the
// node's own machine to import, pinned or cached.
type DatasetAdd struct {
	Path    string `json:"path"`
	Pin     bool   `json:"pin"`
	Encrypt bool   `json:"encrypt,omitempty"`
}

// DatasetPin is the body of POST /v1/datasets/{cid}/pin.
type DatasetPin struct {
	Pin bool `json:"pin"`
}

// AddDataset asks POST /v1/datasets to import a file or folder.
func (c *Client) AddDataset(ctx context.Context, req DatasetAdd) (DatasetView, error) {
	var out DatasetView
	return out, c.post(ctx, "/v1/datasets", req, &out)
}

// Datasets fetches GET /v1/datasets.
func (c *Client) Datasets(ctx context.Context) ([]DatasetView, error) {
	var out []DatasetView
	return out, c.get(ctx, "/v1/datasets", &out)
}

// PinDataset asks POST /v1/datasets/{cid}/pin to pin or unpin a dataset.
func (c *Client) PinDataset(ctx context.Context, cid string, pin bool) (DatasetView, error) {
	var out DatasetView
	return out, c.post(ctx, "/v1/datasets/"+url.PathEscape(cid)+"/pin", DatasetPin{Pin: pin}, &out)
}

// RemoveDataset asks POST /v1/datasets/{cid}/remove to remove a dataset.
func (c *Client) RemoveDataset(ctx context.Context, cid string) (DatasetView, error) {
	var out DatasetView
	return out, c.post(ctx, "/v1/datasets/"+url.PathEscape(cid)+"/remove", struct{}{}, &out)
}
