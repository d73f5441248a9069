package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/repo"
)

// leaseID resolves the lease a user named: a whole ID, or the start of
// one, as 'idlegrid leases' and rent print them (with "…" or "..." left
// on, as the help's examples write them), when exactly one lease of this
// repository starts so. A start that no lease has is passed on whole, for
// the command to say it knows no such lease; one that several have is a
// usage error naming them.
func (e *env) leaseID(typed string) (string, error) {
	p := strings.TrimSuffix(strings.TrimSuffix(typed, "…"), "...")
	ids := e.knownLeases()
	if slices.Contains(ids, p) {
		return p, nil
	}
	var hits []string
	for _, id := range ids {
		if strings.HasPrefix(id, p) {
			hits = append(hits, id)
		}
	}
	switch {
	case len(hits) == 1:
		return hits[0], nil
	case len(hits) > 1:
		slices.Sort(hits)
		more := ""
		if len(hits) > 4 {
			hits, more = hits[:4], ", …"
		}
		return "", usagef("lease %q: %d leases of this repository start so (%s%s): give more of the ID", typed, len(hits), strings.Join(hits, ", "), more)
	}
	return p, nil
}

// knownLeases lists the IDs of this repository's leases: its records
// (through the daemon, or the repository when it is free) and the
// rentals whose output or provider it keeps under logs/.
func (e *env) knownLeases() []string {
	var ids []string
	if ls, err := records(e, func(r api.Records) ([]api.LeaseView, error) { return r.Leases(e.ctx) }); err == nil {
		for _, l := range ls {
			ids = append(ids, l.ID)
		}
	}
	if entries, err := os.ReadDir(filepath.Join(e.repoPath(), repo.LogsDir)); err == nil {
		for _, ent := range entries {
			if id, _, ok := strings.Cut(ent.Name(), "."); ok && strings.HasPrefix(id, "lease-") {
				ids = append(ids, id)
			}
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// leaseArg resolves args[i], a lease, in place.
func (e *env) leaseArg(args []string, i int) error {
	id, err := e.leaseID(args[i])
	if err != nil {
		return err
	}
	args[i] = id
	return nil
}
