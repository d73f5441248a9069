package executor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
)

// DefaultProcessPath is the PATH a process job gets, and where Check and
// Start look for its command, unless the spec's Env sets PATH.
const DefaultProcessPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Process runs each lease as a plain process of the provider's user, for
// private swarms that trust their renters; the node decides when that is
// allowed, not this type.
//
// It isolates nothing and enforces no limit: Spec.NanoCPUs, MemoryBytes
// and PIDs are ignored, and so is Spec.Network (the process shares the
// provider's network). What it does give: a clean environment (PATH, HOME
// set to a fresh per-job directory that is also the working directory,
// the spec's Env, and CUDA_VISIBLE_DEVICES/NVIDIA_VISIBLE_DEVICES set to
// the spec's GPUs), a process group of its own that Stop signals as a
// whole, and SIGKILL to the job's first process when the provider dies
// (to it alone: its children are left to die with it or not). A process
// that leaves the group (setsid) escapes Stop. Output.Stdout and
// Output.Stderr are written from two goroutines: give them one writer only
// if it is safe for concurrent use.
//
// When the job's first process exits, whatever is left of its group is
// killed: the job is over, as it is when a container's first process
// exits.
type Process struct {
	path    string
	baseDir string

	mu   sync.Mutex             // guards jobs alone; held for no I/O
	jobs map[string]*processJob // running jobs by lease ID
}

var _ Executor = (*Process)(nil)

// ProcessOption configures NewProcess.
type ProcessOption func(*Process)

// ProcessPath replaces DefaultProcessPath.
func ProcessPath(path string) ProcessOption {
	return func(p *Process) { p.path = path }
}

// ProcessBaseDir sets where the per-job home directories are made; by
// default os.TempDir().
func ProcessBaseDir(dir string) ProcessOption {
	return func(p *Process) { p.baseDir = dir }
}

// NewProcess returns a process executor. It starts nothing.
func NewProcess(opts ...ProcessOption) (*Process, error) {
	p := &Process{path: DefaultProcessPath, jobs: make(map[string]*processJob)}
	for _, o := range opts {
		o(p)
	}
	if p.path == "" {
		return nil, errors.New("process executor: empty PATH")
	}
	return p, nil
}

// Name returns "process".
func (p *Process) Name() string { return "process" }

// Close does nothing: the jobs keep running, and die with the provider.
func (p *Process) Close() error { return nil }

// Check refuses an empty command and one that is not an executable file
// (an absolute path, or a name found in the job's PATH).
func (p *Process) Check(_ context.Context, s Spec) error {
	if err := s.Images.CheckRef(s.Image); s.Image != "" && err != nil {
		return err
	}
	if _, err := p.resolve(s); err != nil {
		return fmt.Errorf("process check: %w", err)
	}
	return nil
}

// resolve returns the absolute path of the spec's command.
func (p *Process) resolve(s Spec) (string, error) {
	if len(s.Command) == 0 || s.Command[0] == "" {
		return "", errors.New("empty command")
	}
	name := s.Command[0]
	path := p.jobPath(s.Env)
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) {
			return "", fmt.Errorf("command %q: a path must be absolute", name)
		}
		if err := executable(name); err != nil {
			return "", fmt.Errorf("command %q: %w", name, err)
		}
		return name, nil
	}
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue // never run something relative to the job's directory
		}
		if full := filepath.Join(dir, name); executable(full) == nil {
			return full, nil
		}
	}
	return "", fmt.Errorf("command %q not found in PATH %s", name, path)
}

// jobPath is the PATH the job will see: the last PATH in env, else ours.
func (p *Process) jobPath(env []string) string {
	path := p.path
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	return path
}

func executable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return errors.New("not an executable file")
	}
	return nil
}

// Start runs s's command in a new process group with a fresh home
// directory, its output going to out. The kernel sends the death signal
// when the OS thread that started the process ends, which Go only lets
// happen to a goroutine's thread locked with runtime.LockOSThread: do not
// call Start from one.
func (p *Process) Start(ctx context.Context, s Spec, out Output) (Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.LeaseID == "" {
		return nil, errors.New("process start: spec needs a lease ID")
	}
	if len(s.Inputs)+len(s.Outputs) > 0 {
		return nil, fmt.Errorf("process start: lease %s: the process executor takes no inputs or outputs", s.LeaseID)
	}
	for _, m := range s.Mounts {
		if m.Fill != nil {
			return nil, fmt.Errorf("process start: lease %s: the process executor has no memory of a job's own to fill %s in", s.LeaseID, m.Target)
		}
	}
	bin, err := p.resolve(s)
	if err != nil {
		return nil, fmt.Errorf("process start: lease %s: %w", s.LeaseID, err)
	}
	if !p.reserve(s.LeaseID) {
		return nil, fmt.Errorf("process start: lease %s: already running", s.LeaseID)
	}
	j, err := p.start(s, bin, out)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		delete(p.jobs, s.LeaseID)
		return nil, err
	}
	if _, reserved := p.jobs[s.LeaseID]; reserved { // else it has exited already
		p.jobs[s.LeaseID] = j
	}
	return j, nil
}

// reserve takes lease's place in the running set while its job starts
// (outside the lock: a home folder, a fork); false if it is taken.
func (p *Process) reserve(lease string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, dup := p.jobs[lease]; dup {
		return false
	}
	p.jobs[lease] = nil
	return true
}

// start makes the job's home and starts its process.
func (p *Process) start(s Spec, bin string, out Output) (*processJob, error) {
	home, err := os.MkdirTemp(p.baseDir, "idlegrid-job-")
	if err != nil {
		return nil, fmt.Errorf("process start: lease %s: home: %w", s.LeaseID, err)
	}
	cmd := &exec.Cmd{
		Path: bin,
		Args: s.Command,
		Env:  p.env(s, home),
		Dir:  home,
		SysProcAttr: &syscall.SysProcAttr{
			Setpgid:   true,            // Stop signals the whole group
			Pdeathsig: syscall.SIGKILL, // a killed provider takes its jobs along
		},
	}
	if err := linkMounts(home, s.Mounts); err != nil {
		os.RemoveAll(home)
		return nil, fmt.Errorf("process start: lease %s: %w", s.LeaseID, err)
	}
	j, err := startProcessJob(cmd, s.LeaseID, home, out, p.forget)
	if err != nil {
		os.RemoveAll(home)
		return nil, fmt.Errorf("process start: lease %s: %w", s.LeaseID, err)
	}
	return j, nil
}

// env is the job's whole environment; later entries win (os/exec keeps
// the last value of a key), so the GPU variables cannot be overridden.
func (p *Process) env(s Spec, home string) []string {
	env := []string{"PATH=" + p.path, "HOME=" + home}
	env = append(env, s.Env...)
	if len(s.GPUs) > 0 {
		gpus := strings.Join(s.GPUs, ",")
		env = append(env, "CUDA_VISIBLE_DEVICES="+gpus, "NVIDIA_VISIBLE_DEVICES="+gpus)
	}
	return env
}

// forget drops a job that has exited from the running set.
func (p *Process) forget(j *processJob) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if held, ok := p.jobs[j.lease]; ok && (held == j || held == nil) { // nil: still starting
		delete(p.jobs, j.lease)
	}
}

// Adopt always fails with ErrNotFound: a process job dies with the
// provider that started it, so there is never one to find.
func (p *Process) Adopt(_ context.Context, leaseID string, _ Offsets, _ Output) (Job, error) {
	return nil, fmt.Errorf("process adopt: lease %s: %w", leaseID, ErrNotFound)
}

// Logs always fails with ErrNotFound: a process job's output goes to its
// Output as it is written and is kept nowhere else.
func (p *Process) Logs(_ context.Context, leaseID string, _, _ Offsets, _ Output) (Offsets, error) {
	return Offsets{}, fmt.Errorf("process logs: lease %s: %w", leaseID, ErrNotFound)
}

// Running lists, sorted, the leases whose processes this value started and
// that have not exited yet.
func (p *Process) Running(_ context.Context) ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(maps.Keys(p.jobs)), nil
}

// linkMounts makes each mount's folder appear at home followed by its
// target, as a link: a process job has no container to mount it in.
func linkMounts(home string, ms []Mount) error {
	for _, m := range ms {
		at := filepath.Join(home, filepath.FromSlash(m.Target))
		if err := os.MkdirAll(filepath.Dir(at), 0o755); err != nil {
			return fmt.Errorf("mount %s: %w", m.Target, err)
		}
		if err := os.Symlink(m.Source, at); err != nil {
			return fmt.Errorf("mount %s: %w", m.Target, err)
		}
	}
	return nil
}
