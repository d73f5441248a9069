package executor

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
)

// DefaultLabelPrefix prefixes the labels and names of the containers a
// Docker executor starts: labels "idlegrid.lease" and "idlegrid.managed",
// names "idlegrid-<lease>".
const DefaultLabelPrefix = "idlegrid"

// Docker runs each lease as one container of a local Docker engine.
//
// Containers run with no network unless the spec asks for one, with every
// capability dropped, no-new-privileges, an init process (so a workload
// that never installed a SIGTERM handler still stops on SIGTERM), the
// spec's CPU, memory (swap included) and PID limits, and exactly the GPUs
// named, through an "nvidia" device request. Their output reaches the
// job's Output through an attach made before the container starts, so
// none is lost however soon it exits. A lease never waits on a registry:
// Check wants the image present, and Pull fetches it before the lease.
type Docker struct {
	cli    *client.Client
	prefix string
	// noNetns reaches a job's ports through the image's nc alone.
	noNetns bool
	// life ends the output streams and exit watchers of every job when
	// Close is called; the containers themselves keep running.
	life  context.Context
	close context.CancelFunc
	// disk watches what fetches put on the engine's disk as they run.
	disk diskWatch
}

var _ Executor = (*Docker)(nil)

// NewDocker returns an executor for the engine the options name. It does
// not contact the engine: an unreachable one shows as ErrNoEngine from the
// first call that needs it.
func NewDocker(opts ...DockerOption) (*Docker, error) {
	cfg := dockerConfig{prefix: DefaultLabelPrefix}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.prefix == "" {
		return nil, errors.New("docker executor: empty label prefix")
	}
	copts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if cfg.host != "" {
		copts = append(copts, client.WithHost(cfg.host))
	}
	cli, err := client.NewClientWithOpts(copts...)
	if err != nil {
		return nil, fmt.Errorf("docker executor: client: %w", err)
	}
	life, cancel := context.WithCancel(context.Background())
	d := &Docker{cli: cli, prefix: cfg.prefix, noNetns: cfg.noNetns, life: life, close: cancel}
	d.disk.slack = cfg.slack
	return d, nil
}

// Name returns "docker".
func (d *Docker) Name() string { return "docker" }

// Close ends the output streams of the jobs this value returned (their
// Wait then fails) and closes the connection to the engine. The
// containers keep running; a new Docker value can Adopt them.
func (d *Docker) Close() error {
	d.close()
	return d.cli.Close()
}

// Check refuses a spec whose image is not present (ErrUnknownImage) or
// whose engine cannot be reached (ErrNoEngine).
//
// It cannot tell whether the engine can attach GPUs: Docker 20.10 says
// which device drivers it has through no API call, only by failing
// ContainerStart. Start reports that as ErrNoGPUSupport.
func (d *Docker) Check(ctx context.Context, s Spec) error {
	if s.Image == "" {
		return errors.New("docker check: empty image")
	}
	if err := s.Images.CheckRef(s.Image); err != nil {
		return err
	}
	img, err := d.cli.ImageInspect(ctx, s.Image)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return fmt.Errorf("docker check: image %s is not present on this provider: %w", s.Image, ErrUnknownImage)
		}
		return d.engineErr("docker check", err)
	}
	// By what the image is: its ID, and every name it has (one asked for
	// by ID or by digest is judged by its tags too).
	return s.Images.CheckImage(s.Image, img.ID, append(slices.Clone(img.RepoTags), img.RepoDigests...))
}

// Start creates a container for s, attaches to its output and starts it,
// so out receives everything it writes. A spec asking for GPUs on an
// engine without the NVIDIA container toolkit fails with ErrNoGPUSupport
// and leaves no container.
func (d *Docker) Start(ctx context.Context, s Spec, out Output) (Job, error) {
	if s.LeaseID == "" || s.Image == "" {
		return nil, errors.New("docker start: spec needs a lease ID and an image")
	}
	// The job runs the image the name stands for now, by its ID, judged
	// by the provider's rules as it is: no name can move between the
	// check and the container.
	if err := s.Images.CheckRef(s.Image); err != nil {
		return nil, fmt.Errorf("docker start: lease %s: %w", s.LeaseID, err)
	}
	img, err := d.cli.ImageInspect(ctx, s.Image)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, fmt.Errorf("docker start: lease %s: image %s is not present on this provider: %w", s.LeaseID, s.Image, ErrUnknownImage)
		}
		return nil, d.engineErr("docker start: lease "+s.LeaseID+": image "+s.Image, err)
	}
	if err := s.Images.CheckImage(s.Image, img.ID, append(slices.Clone(img.RepoTags), img.RepoDigests...)); err != nil {
		return nil, fmt.Errorf("docker start: lease %s: %w", s.LeaseID, err)
	}
	s.Image = img.ID
	cfg, host := d.containerConfig(s)
	if s.waits() {
		if err := d.wrap(ctx, s, cfg); err != nil {
			return nil, fmt.Errorf("docker start: lease %s: %w", s.LeaseID, err)
		}
	}
	created, err := d.cli.ContainerCreate(ctx, cfg, host, nil, nil, d.containerName(s.LeaseID))
	if cerrdefs.IsConflict(err) && d.clearName(ctx, d.containerName(s.LeaseID)) {
		created, err = d.cli.ContainerCreate(ctx, cfg, host, nil, nil, d.containerName(s.LeaseID))
	}
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, fmt.Errorf("docker start: lease %s: image %s is not present on this provider: %w", s.LeaseID, s.Image, ErrUnknownImage)
		}
		return nil, d.engineErr("docker start: lease "+s.LeaseID+": create", err)
	}
	id := created.ID
	stream, err := d.attach(ctx, id)
	if err != nil {
		d.discard(id)
		return nil, fmt.Errorf("docker start: lease %s: %w", s.LeaseID, err)
	}
	if err := d.cli.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
		stream.Close()
		d.discard(id)
		if strings.Contains(err.Error(), "could not select device driver") {
			return nil, fmt.Errorf("docker start: lease %s: gpus %s: %w (%v)", s.LeaseID, strings.Join(s.GPUs, ","), ErrNoGPUSupport, err)
		}
		return nil, d.engineErr("docker start: lease "+s.LeaseID, err)
	}
	j := d.watch(id, s.LeaseID, streamed(d, stream, out))
	if err := d.putInputs(ctx, s); err != nil {
		if serr := j.Stop(context.WithoutCancel(ctx), 0); serr != nil {
			d.discard(id)
		}
		return nil, fmt.Errorf("docker start: lease %s: %w", s.LeaseID, err)
	}
	if len(s.Outputs) > 0 {
		go d.collect(j, s)
	}
	return j, nil
}

// Flags a wrapped job's script and the provider pass in /tmp: inputs in
// place (the command may start), the command ended, outputs packed (the
// container may exit, with the command's code).
const (
	inputsFlag  = "/tmp/.idlegrid-inputs"
	endedFlag   = "/tmp/.idlegrid-ended"
	outputsFlag = "/tmp/.idlegrid-outputs"
)

// inputsWait starts a wrapped job: it waits for inputsFlag.
const inputsWait = `while [ ! -e ` + inputsFlag + ` ]; do sleep 0.05; done; rm -f ` + inputsFlag + `; `

// outputsWait runs the command as a child (a stop's SIGTERM passed on),
// then says it ended and waits for the outputs to be packed, OutputsWait
// at most, before it exits with the command's code.
var outputsWait = `"$@" & pid=$!; trap 'kill -TERM $pid 2>/dev/null' TERM INT; ` +
	`while :; do wait $pid; code=$?; kill -0 $pid 2>/dev/null || break; done; ` +
	`touch ` + endedFlag + `; ` +
	fmt.Sprintf(`i=0; while [ ! -e %s ] && [ $i -lt %d ]; do sleep 0.1; i=$((i+1)); done; exit $code`, outputsFlag, int(OutputsWait/(100*time.Millisecond)))

// wrap makes the container start under /bin/sh, which waits for the
// inputs, then runs the command it would have run (the image's
// entrypoint, then the spec's command or the image's): in its place, or,
// with outputs, as a child it outlives while they are packed.
func (d *Docker) wrap(ctx context.Context, s Spec, cfg *container.Config) error {
	img, err := d.cli.ImageInspect(ctx, s.Image)
	if err != nil {
		return d.engineErr("inputs: image "+s.Image, err)
	}
	var entry, cmd []string
	if img.Config != nil {
		entry, cmd = img.Config.Entrypoint, img.Config.Cmd
	}
	if len(s.Command) > 0 {
		cmd = s.Command
	}
	argv := append(slices.Clone(entry), cmd...)
	if len(argv) == 0 {
		return fmt.Errorf("inputs: image %s names no command and the lease none", s.Image)
	}
	script := inputsWait + `exec "$@"`
	if len(s.Outputs) > 0 {
		script = inputsWait + outputsWait
	}
	cfg.Entrypoint, cfg.Cmd = []string{"/bin/sh", "-c", script, "idlegrid-job"}, argv
	return nil
}

// Collect has an adopted job pack outputs once its command ended, as
// Start does for the jobs it starts: a restarted provider passes the
// outputs its lease names. A job not of this executor is left alone.
func (d *Docker) Collect(j Job, leaseID string, outputs []OutputPath) {
	if dj, ok := j.(*dockerJob); ok && len(outputs) > 0 {
		go d.collect(dj, Spec{LeaseID: leaseID, Outputs: outputs})
	}
}

// collect waits for a wrapped job's command to end, packs each output
// with the image's tar for its Save, then lets the container exit.
func (d *Docker) collect(j *dockerJob, s Spec) {
	ctx := d.life
	for {
		select {
		case <-j.done:
			return
		case <-time.After(time.Second):
		}
		if code, err := d.Exec(ctx, s.LeaseID, ExecSpec{Argv: []string{"test", "-e", endedFlag}, Stdout: io.Discard, Stderr: io.Discard}); err == nil && code == 0 {
			break
		}
	}
	for _, out := range s.Outputs {
		PackTar(ctx, d, s.LeaseID, out.Path, out.Save) // Save learns of a failure
	}
	d.Exec(ctx, s.LeaseID, ExecSpec{Argv: []string{"touch", outputsFlag}, Stdout: io.Discard, Stderr: io.Discard})
}

// putInputs unpacks the spec's inputs in the running container, each
// with the image's tar as the job's user, then lets a wrapped job start.
func (d *Docker) putInputs(ctx context.Context, s Spec) error {
	if !s.waits() {
		return nil
	}
	for _, m := range s.Mounts {
		if m.Fill == nil {
			continue
		}
		r, err := m.Fill()
		if err != nil {
			return fmt.Errorf("mount %s: %w", m.Target, err)
		}
		var stderr bytes.Buffer
		code, err := d.Exec(ctx, s.LeaseID, ExecSpec{
			Argv: []string{"tar", "-x", "-o", "-f", "-", "-C", m.Target}, User: "0:0",
			Stdin: r, Stdout: io.Discard, Stderr: &stderr,
		})
		r.Close()
		if err := ranOK("tar -x", code, err, &stderr); err != nil {
			return fmt.Errorf("mount %s: %w", m.Target, err)
		}
	}
	for i, in := range s.Inputs {
		r, err := in.Open()
		if err != nil {
			return fmt.Errorf("input %d: %w", i, err)
		}
		err = UnpackTar(ctx, d, s.LeaseID, in.Dir, r)
		r.Close()
		if err != nil {
			return fmt.Errorf("input %d into %s: %w", i, in.Dir, err)
		}
	}
	var stderr bytes.Buffer
	code, err := d.Exec(ctx, s.LeaseID, ExecSpec{Argv: []string{"touch", inputsFlag}, Stdout: io.Discard, Stderr: &stderr})
	if err := ranOK("touch", code, err, &stderr); err != nil {
		return fmt.Errorf("inputs in place, but the job not let start: %w", err)
	}
	return nil
}

// waits says whether a job starts only once the provider let it: after
// its inputs and filled mounts are in place, or to pack its outputs.
func (s Spec) waits() bool {
	return len(s.Inputs)+len(s.Outputs) > 0 || slices.ContainsFunc(s.Mounts, func(m Mount) bool { return m.Fill != nil })
}

// fillBytes is the size of a filled mount's memory: the bytes it names
// (an encrypted tar is a little larger than what it holds) and a tenth
// more, at least 1 MiB.
func fillBytes(m Mount) int64 { return max(m.Bytes+m.Bytes/10, 1<<20) }

// containerConfig turns a spec into the engine's create request.
func (d *Docker) containerConfig(s Spec) (*container.Config, *container.HostConfig) {
	cfg := &container.Config{
		Image: s.Image,
		Cmd:   s.Command,
		Env:   s.Env,
		Labels: map[string]string{
			d.label("lease"):   s.LeaseID,
			d.label("managed"): "1",
		},
	}
	useInit := true
	uid, gid := userIDs(cmp.Or(s.User, DefaultUser))
	cfg.User, cfg.WorkingDir = uid+":"+gid, "/workspace"
	cfg.Env = append([]string{"HOME=/workspace"}, s.Env...)
	host := &container.HostConfig{
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		Init:           &useInit,
		ReadonlyRootfs: true,
		Tmpfs: map[string]string{
			"/workspace": fmt.Sprintf("rw,nosuid,nodev,size=%d,uid=%s,gid=%s,mode=0700", cmp.Or(s.WorkspaceBytes, DefaultWorkspace), uid, gid),
			"/tmp":       fmt.Sprintf("rw,nosuid,nodev,noexec,size=%d,mode=1777", TmpBytes),
		},
		LogConfig: container.LogConfig{Type: "json-file", Config: map[string]string{
			"max-size": strconv.FormatInt(cmp.Or(s.LogBytes, DefaultLogBytes)/2, 10), "max-file": "2",
		}},
	}
	if !s.Network {
		host.NetworkMode = "none"
	}
	for _, m := range s.Mounts {
		if m.Fill != nil { // root's, read-only to the job's user
			host.Tmpfs[m.Target] = fmt.Sprintf("rw,nosuid,nodev,noexec,size=%d,mode=0755", fillBytes(m))
			continue
		}
		host.Mounts = append(host.Mounts, mount.Mount{Type: mount.TypeBind, Source: m.Source, Target: m.Target, ReadOnly: true,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate, NonRecursive: true}})
	}
	r := &host.Resources
	r.Ulimits = []*container.Ulimit{{Name: "nofile", Soft: OpenFiles, Hard: OpenFiles}, {Name: "core", Soft: 0, Hard: 0}}
	r.NanoCPUs = s.NanoCPUs
	if s.MemoryBytes > 0 {
		r.Memory = s.MemoryBytes
		r.MemorySwap = s.MemoryBytes // no swap beyond the limit
	}
	if s.PIDs > 0 {
		pids := s.PIDs
		r.PidsLimit = &pids
	}
	if len(s.GPUs) > 0 {
		r.DeviceRequests = []container.DeviceRequest{{
			Driver:       "nvidia",
			DeviceIDs:    append([]string(nil), s.GPUs...),
			Capabilities: [][]string{{"gpu"}},
		}}
	}
	return cfg, host
}

// userIDs splits a Spec's numeric "uid[:gid]" (the group defaults to the
// user's number).
func userIDs(user string) (uid, gid string) {
	uid, gid, ok := strings.Cut(user, ":")
	if !ok {
		gid = uid
	}
	return uid, gid
}

// Adopt finds the container labelled with leaseID and follows its output
// from the offsets from: what it wrote before (the engine's log keeps it
// until the container is removed) and what it writes next. A container
// that already stopped is adopted too: out gets the rest of its output,
// Wait returns its exit code, and Stop removes it. When several carry the
// label, the newest wins.
func (d *Docker) Adopt(ctx context.Context, leaseID string, from Offsets, out Output) (Job, error) {
	c, err := d.find(ctx, leaseID)
	if err != nil {
		return nil, fmt.Errorf("docker adopt: %w", err)
	}
	return d.watch(c.ID, leaseID, d.followed(c.ID, c.State == "running", from, out)), nil
}

// followed copies a container's logged output from the offsets from:
// following the log while it runs, then reading it once more after the
// stop, for what a follower that stopped early left out (Docker 20.10's
// json-file follower can stop before the end).
func (d *Docker) followed(id string, running bool, from Offsets, out Output) copier {
	stdout := &span{w: orDiscard(out.Stdout), from: from.Stdout, to: -1}
	stderr := &span{w: orDiscard(out.Stderr), from: from.Stderr, to: -1}
	c := copier{tail: func() error {
		return d.readLogs(d.life, id, false,
			&span{w: stdout.w, from: max(from.Stdout, stdout.at), to: -1},
			&span{w: stderr.w, from: max(from.Stderr, stderr.at), to: -1})
	}}
	if running {
		fctx, cut := context.WithCancel(d.life)
		c.run = func() error { defer cut(); return d.readLogs(fctx, id, true, stdout, stderr) }
		c.cut = cut
	}
	return c
}

// Logs writes the part of leaseID's logged output between from and to,
// and returns where the log ends. The engine keeps the last
// Spec.LogBytes of a container's output until the container is removed.
func (d *Docker) Logs(ctx context.Context, leaseID string, from, to Offsets, out Output) (Offsets, error) {
	c, err := d.find(ctx, leaseID)
	if err != nil {
		return Offsets{}, fmt.Errorf("docker logs: %w", err)
	}
	stdout := &span{w: orDiscard(out.Stdout), from: from.Stdout, to: to.Stdout}
	stderr := &span{w: orDiscard(out.Stderr), from: from.Stderr, to: to.Stderr}
	if err := d.readLogs(ctx, c.ID, false, stdout, stderr); err != nil {
		return Offsets{}, fmt.Errorf("docker logs: lease %s: %w", leaseID, err)
	}
	return Offsets{Stdout: stdout.at, Stderr: stderr.at}, nil
}

// readLogs copies container id's logged output to stdout and stderr:
// what it holds, and with follow what comes next until the container
// stops or ctx ends.
func (d *Docker) readLogs(ctx context.Context, id string, follow bool, stdout, stderr io.Writer) error {
	rc, err := d.cli.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true, Follow: follow})
	if err != nil {
		return d.engineErr("logs", err)
	}
	defer rc.Close()
	if _, err := stdcopy.StdCopy(stdout, stderr, rc); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

// find returns the newest container labelled with leaseID. A container
// still in "created" never ran: a provider killed between creating and
// starting it. It is removed, so the lease's job is started afresh
// rather than adopted as a job that exited with 0.
func (d *Docker) find(ctx context.Context, leaseID string) (*container.Summary, error) {
	list, err := d.cli.ContainerList(ctx, container.ListOptions{
		All:     true,
		Filters: filters.NewArgs(filters.Arg("label", d.label("lease")+"="+leaseID)),
	})
	if err != nil {
		return nil, d.engineErr("lease "+leaseID, err)
	}
	var newest *container.Summary
	for i, c := range list {
		if c.State == "created" {
			d.discard(c.ID)
			continue
		}
		if newest == nil || c.Created > newest.Created {
			newest = &list[i]
		}
	}
	if newest == nil {
		return nil, fmt.Errorf("lease %s: %w", leaseID, ErrNotFound)
	}
	return newest, nil
}

// span passes on the bytes of one output stream that lie between the
// offsets from and to (to < 0: no end), counting all it is given.
type span struct {
	w        io.Writer
	at       int64
	from, to int64
}

func (s *span) Write(p []byte) (int, error) {
	lo := s.at
	s.at += int64(len(p))
	a, b := max(lo, s.from), s.at
	if s.to >= 0 {
		b = min(b, s.to)
	}
	if a < b {
		if _, err := s.w.Write(p[a-lo : b-lo]); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// Running lists the leases of every container this executor's label
// prefix marks as managed, running or exited, sorted.
func (d *Docker) Running(ctx context.Context) ([]string, error) {
	list, err := d.cli.ContainerList(ctx, container.ListOptions{
		All:     true,
		Filters: filters.NewArgs(filters.Arg("label", d.label("managed")+"=1")),
	})
	if err != nil {
		return nil, d.engineErr("docker running", err)
	}
	seen := make(map[string]bool, len(list))
	leases := make([]string, 0, len(list))
	for _, c := range list {
		l := c.Labels[d.label("lease")]
		if l != "" && !seen[l] {
			seen[l] = true
			leases = append(leases, l)
		}
	}
	sort.Strings(leases)
	return leases, nil
}

func (d *Docker) label(key string) string { return d.prefix + "." + key }

// containerName is the prefix and the lease ID with every character the
// engine refuses in a name replaced by '-'. The label, not the name,
// identifies the lease; the name is for a human running `docker ps`.
func (d *Docker) containerName(leaseID string) string {
	b := []byte(d.prefix + "-" + leaseID)
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '_' || c == '.' || c == '-'
		if !ok {
			b[i] = '-'
		}
	}
	return string(b)
}

// clearName removes the container holding name, so that the lease's
// job can be created again; true when it is gone. Start is asked only
// for a lease whose job was never recorded as started, so the holder is
// a container of a provider killed while starting it: created and never
// started, left exited, or even running, when the engine finished a
// start the killed provider had asked for after find discarded the
// container as "created". A job never recorded as started is started
// afresh, not left running unwatched and unpaid.
//
// The engine refuses to remove a container while it is starting it, or
// while another removal of it runs (find's discard of the same
// container), so the removal is tried again every clearRetry for up to
// clearFor.
func (d *Docker) clearName(ctx context.Context, name string) bool {
	ctx, cancel := context.WithTimeout(ctx, clearFor)
	defer cancel()
	for {
		info, err := d.cli.ContainerInspect(ctx, name)
		switch {
		case cerrdefs.IsNotFound(err):
			return true
		case err == nil && d.cli.ContainerRemove(ctx, info.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}) == nil:
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(clearRetry):
		}
	}
}

// How long and how often clearName tries to free a name.
const (
	clearFor   = 20 * time.Second
	clearRetry = 200 * time.Millisecond
)

// discard removes a container Start could not hand over; the error that
// made Start give up is the one worth reporting.
func (d *Docker) discard(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = d.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
}

// engineErr wraps err with op, and with ErrNoEngine and the engine's
// address when the engine could not be reached at all.
func (d *Docker) engineErr(op string, err error) error {
	if client.IsErrConnectionFailed(err) {
		return fmt.Errorf("%s: %w at %s: %w", op, ErrNoEngine, d.cli.DaemonHost(), err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// Engine is what a provider needs to know of its Docker engine.
type Engine struct {
	Version        string   `json:"version"`
	Runtimes       []string `json:"runtimes"`
	DefaultRuntime string   `json:"default_runtime"`
	RootDir        string   `json:"root_dir"` // where images and containers live
	// CDIDevices are the Container Device Interface devices the engine
	// knows (nvidia.com/gpu=… with the NVIDIA Container Toolkit's CDI
	// spec), a second way to attach GPUs.
	CDIDevices []string `json:"cdi_devices,omitempty"`
}

// Engine asks the engine what it is; an unreachable one is ErrNoEngine.
func (d *Docker) Engine(ctx context.Context) (Engine, error) {
	info, err := d.cli.Info(ctx)
	if err != nil {
		return Engine{}, d.engineErr("info", err)
	}
	e := Engine{Version: info.ServerVersion, DefaultRuntime: info.DefaultRuntime, RootDir: info.DockerRootDir}
	for name := range info.Runtimes {
		e.Runtimes = append(e.Runtimes, name)
	}
	slices.Sort(e.Runtimes)
	for _, dev := range info.DiscoveredDevices {
		e.CDIDevices = append(e.CDIDevices, dev.ID)
	}
	return e, nil
}
