package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/idlegrid/idlegrid/node/fault"
)

var _ Node = (*Client)(nil)

// ErrNoDaemon is returned when no daemon answers at the address.
var ErrNoDaemon = errors.New("no daemon is running")

// Client is a daemon's API over HTTP: the Node that a command in another
// process talks to.
type Client struct {
	base  string
	token string
	hc    *http.Client
}

// NewClient returns a client for base, such as "http://127.0.0.1:5080",
// that sends token (the repository's TokenFile) with every request.
func NewClient(base, token string) *Client {
	return &Client{base: base, token: token, hc: &http.Client{Timeout: 2 * time.Minute}}
}

// LoginURL is the dashboard's sign-in address on this API, with the
// client's token (see LoginURL).
func (c *Client) LoginURL() string { return LoginURL(c.base, c.token) }

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

// Offers fetches GET /v1/offers with the query's filters.
func (c *Client) Offers(ctx context.Context, q OfferQuery) ([]OfferView, error) {
	var out []OfferView
	return out, c.get(ctx, "/v1/offers?"+offerValues(q).Encode(), &out)
}

// Market fetches GET /v1/market: the offers q selects, summed up, with
// the cheapest limit listed.
func (c *Client) Market(ctx context.Context, q OfferQuery, limit int) (MarketSummary, error) {
	v := offerValues(q)
	if limit > 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	var out MarketSummary
	return out, c.get(ctx, "/v1/market?"+v.Encode(), &out)
}

// offerValues is q as GET /v1/offers' and /v1/market's query.
func offerValues(q OfferQuery) url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"gpu": q.GPU, "country": q.Country, "max_price": q.MaxPrice, "tier": q.Tier, "sort": q.Sort, "where": q.Where, "dataset": q.Dataset} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if q.MinVRAMGiB > 0 {
		v.Set("min_vram_gib", strconv.Itoa(q.MinVRAMGiB))
	}
	return v
}

// Match asks POST /v1/match for ranked candidates.
func (c *Client) Match(ctx context.Context, req BidRequest) (MatchResult, error) {
	var out MatchResult
	return out, c.post(ctx, "/v1/match", req, &out)
}

// PlaceBid publishes a bid through POST /v1/bids and returns its quotes.
func (c *Client) PlaceBid(ctx context.Context, req BidRequest) (BidResult, error) {
	var out BidResult
	return out, c.post(ctx, "/v1/bids", req, &out)
}

// Attest asks POST /v1/attest to challenge a peer.
func (c *Client) Attest(ctx context.Context, req AttestRequest) (AttestResult, error) {
	var out AttestResult
	return out, c.post(ctx, "/v1/attest", req, &out)
}

// Leases fetches GET /v1/leases.
func (c *Client) Leases(ctx context.Context) ([]LeaseView, error) {
	var out []LeaseView
	return out, c.get(ctx, "/v1/leases", &out)
}

// Lease fetches GET /v1/leases/{id}.
func (c *Client) Lease(ctx context.Context, id string) (LeaseView, error) {
	var out LeaseView
	return out, c.get(ctx, "/v1/leases/"+url.PathEscape(id), &out)
}

// GPUs fetches GET /v1/gpus: a provider's GPUs as read now.
func (c *Client) GPUs(ctx context.Context) (GPUsStatus, error) {
	var out GPUsStatus
	return out, c.get(ctx, "/v1/gpus", &out)
}

// StartRental asks POST /v1/rentals to start a rental the daemon runs.
func (c *Client) StartRental(ctx context.Context, req RentRequest) (RentalView, error) {
	var out RentalView
	return out, c.post(ctx, "/v1/rentals", req, &out)
}

// Rentals fetches GET /v1/rentals.
func (c *Client) Rentals(ctx context.Context) ([]RentalView, error) {
	var out []RentalView
	return out, c.get(ctx, "/v1/rentals", &out)
}

// Reputation asks GET /v1/reputation/{peer} for this node's view of peer.
func (c *Client) Reputation(ctx context.Context, peer string) (ReputationView, error) {
	var out ReputationView
	return out, c.get(ctx, "/v1/reputation/"+url.PathEscape(peer), &out)
}

// NoteExtension asks POST /v1/leases/{id}/extension to record a lease's
// extension.
func (c *Client) NoteExtension(ctx context.Context, id string, extension []byte) (LeaseView, error) {
	var out LeaseView
	return out, c.post(ctx, "/v1/leases/"+url.PathEscape(id)+"/extension", ExtensionNote{Extension: extension}, &out)
}

// CancelLease asks POST /v1/leases/{id}/cancel to end a lease.
func (c *Client) CancelLease(ctx context.Context, id string) (LeaseView, error) {
	var out LeaseView
	return out, c.post(ctx, "/v1/leases/"+url.PathEscape(id)+"/cancel", struct{}{}, &out)
}

// Redeem asks POST /v1/channels/redeem to redeem the provider's vouchers
// now.
func (c *Client) Redeem(ctx context.Context) (RedeemResult, error) {
	var out RedeemResult
	return out, c.post(ctx, "/v1/channels/redeem", struct{}{}, &out)
}

// Reload asks POST /v1/reload to take on the repository's config.toml.
func (c *Client) Reload(ctx context.Context) (ReloadResult, error) {
	var out ReloadResult
	return out, c.post(ctx, "/v1/reload", struct{}{}, &out)
}

// Receipts fetches GET /v1/receipts.
func (c *Client) Receipts(ctx context.Context) ([]ReceiptView, error) {
	var out []ReceiptView
	return out, c.get(ctx, "/v1/receipts", &out)
}

// Ledger fetches GET /v1/ledger.
func (c *Client) Ledger(ctx context.Context) ([]LedgerEntry, error) {
	var out []LedgerEntry
	return out, c.get(ctx, "/v1/ledger", &out)
}

func (c *Client) post(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return c.do(req, path, out)
}

func (c *Client) get(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	return c.do(req, path, out)
}

func (c *Client) do(req *http.Request, path string, out any) error {
	req.Header.Set(TokenHeader, "Bearer "+c.token)
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%w at %s (%v)", ErrNoDaemon, c.base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		err := fmt.Errorf("%s: %s", path, resp.Status)
		var e Error
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			err = fmt.Errorf("%s: %s", path, e.Error)
		}
		if kind := kindOf(resp.StatusCode); kind != nil {
			return fault.Mark(kind, err)
		}
		return err
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("%s: decode: %w", path, err)
	}
	return nil
}
