package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/idlegrid/idlegrid/node"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/repo"
)

// devSwarm is the name of the private swarm a devstack without Docker runs.
const devSwarm = "devstack"

// chooseJobs decides how the devstack's providers run jobs: containers
// when a Docker engine answers (with the busybox image made locally), else
// plain processes, which only a private swarm may run, so the devstack
// makes its swarm private.
func (s *devstack) chooseJobs(ctx context.Context) error {
	probe, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	img, err := node.DevImage(probe)
	if err == nil {
		s.image, s.executor = img, config.ExecutorDocker
		fmt.Fprintf(s.e.stdout, "devstack: jobs run as Docker containers of %s\n", s.image)
		return nil
	}
	var key bytes.Buffer
	if kerr := repo.WriteNewSwarmKey(&key); kerr != nil {
		return kerr
	}
	s.swarmKey, s.executor, s.image = key.Bytes(), config.ExecutorProcess, "none (plain process)"
	fmt.Fprintf(s.e.stdout, "devstack: no usable Docker engine (%v):\n  jobs run as PLAIN PROCESSES on this machine, in a private devstack swarm\n", err)
	return nil
}

// initOptions are the options of every devstack repository.
func (s *devstack) initOptions(profile string, bootstrap []string) repo.InitOptions {
	o := repo.InitOptions{Profile: profile, ListenPort: 0, APIPort: 0, Bootstrap: bootstrap}
	if s.swarmKey != nil {
		o.Swarm, o.SwarmKey = devSwarm, s.swarmKey
	}
	return o
}

// makeRenter creates the renter repository the printed rent command uses.
func (s *devstack) makeRenter() error {
	s.renter = filepath.Join(s.dir, "renter")
	_, err := repo.Init(s.renter, s.initOptions(config.ProfileRenter, []string{s.boot}))
	return err
}

// rentCommand is the command that rents from this devstack.
func (s *devstack) rentCommand() string {
	img := s.image
	if s.executor == config.ExecutorProcess {
		img = "any"
	}
	return fmt.Sprintf(`idlegrid rent --repo %s --bootstrap %s --gpu H100 --count 2 --hours 1 --max-price 3 --image %s -- sh -c 'echo "hello from $IDLEGRID_GPUS"'`,
		s.renter, s.boot, img)
}

// demo rents from the devstack as a renter would: two fake H100s, a job
// that prints and exits, its output streamed here, then the receipt.
func (s *devstack) demo(ctx context.Context) error {
	fmt.Fprintf(s.e.stdout, "demo: %s\n", s.rentCommand())
	r, err := repo.Open(s.renter)
	if err != nil {
		return err
	}
	cfg, err := r.Config()
	if err != nil {
		return err
	}
	cfg.API.Port, cfg.Network.Listen = 0, config.ListenAddrs("127.0.0.1", 0, s.swarmKey == nil)
	n, err := node.New(r, cfg, node.Options{Light: true, Version: version, Logger: slogDefault().With("devnode", "renter")})
	if err != nil {
		return err
	}
	if err := n.Start(ctx); err != nil {
		return err
	}
	defer n.Close()
	img := s.image
	if s.executor == config.ExecutorProcess {
		img = "any"
	}
	req := api.RentRequest{
		BidRequest: api.BidRequest{GPUs: []string{"H100"}, Count: 2, Hours: 1, Tier: "silver", MaxPrice: "3", Image: img},
		Command:    []string{"sh", "-c", `echo "hello from $IDLEGRID_GPUS"; for i in 1 2 3; do echo "step $i"; sleep 1; done`},
	}
	progress := func(line string) { fmt.Fprintf(s.e.stdout, "demo: %s\n", line) }
	res, err := n.Rent(ctx, req, node.RentOutput{Stdout: s.e.stdout, Stderr: s.e.stdout, Progress: progress})
	if err != nil {
		return err
	}
	rc := res.Receipt
	fmt.Fprintf(s.e.stdout, "demo: receipt for lease %s: %s, %d s metered, %s %s, %d beats, signed by %s\n",
		rc.LeaseID, rc.Outcome, rc.MeteredSeconds, rc.Amount, rc.Currency, rc.Beats, strings.Join(rc.SignedBy, " and "))
	if rc.Note != "" {
		fmt.Fprintf(s.e.stdout, "demo: %s\n", rc.Note)
	}
	t := res.Timings
	fmt.Fprintf(s.e.stdout, "demo: first output %s after asking (discover %s, match %s, attest %s, negotiate %s, start %s)\n",
		ms(t.FirstOutput), ms(t.Discover), ms(t.Match), ms(t.Attest), ms(t.Negotiate), ms(t.Start))
	return nil
}
