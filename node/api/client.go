package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// ErrNoDaemon is returned when no daemon answers at the address.
var ErrNoDaemon = errors.New("no daemon is running")

// Client reads a daemon's API.
type Client struct {
	base string
	hc   *http.Client
}

// NewClient returns a client for base, such as "http://127.0.0.1:5080".
func NewClient(base string) *Client {
	return &Client{base: base, hc: &http.Client{Timeout: 10 * time.Second}}
}

// Status fetches GET /v1/status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var s Status
	return s, c.get(ctx, "/v1/status", &s)
}

// Peers fetches GET /v1/peers.
func (c *Client) Peers(ctx context.Context) ([]Peer, error) {
	var p []Peer
	return p, c.get(ctx, "/v1/peers", &p)
}

func (c *Client) get(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%w at %s (%v)", ErrNoDaemon, c.base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e Error
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return fmt.Errorf("GET %s: %s", path, e.Error)
		}
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("GET %s: decode: %w", path, err)
	}
	return nil
}
