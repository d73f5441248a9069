package executor

import (
	"context"
	"io"
	"time"
)

// Spec is what to run for one lease.
type Spec struct {
	// LeaseID names the job: containers are labelled with it, so a
	// restarted provider finds what it started (see Executor.Adopt).
	LeaseID string
	Image   string   // container image; ignored by the process executor
	Command []string // argv; for a container, empty means the image's default
	Env     []string // KEY=VALUE
	// GPUs by UUID; a container gets exactly these through a device
	// request, a process through CUDA_VISIBLE_DEVICES/NVIDIA_VISIBLE_DEVICES.
	GPUs []string
	// Limits; zero means no limit of that kind.
	NanoCPUs    int64 // 1e9 = one CPU
	MemoryBytes int64
	PIDs        int64
	// Network: false (the default) runs with no network at all.
	Network bool
	// User the workload runs as, numeric: "uid" or "uid:gid"; empty:
	// DefaultUser. Root ("0") must be named.
	User string
	// WorkspaceBytes bounds the one writable place a container has,
	// /workspace (its home and working directory); the rest of its
	// filesystem is read-only but a small /tmp. Zero: DefaultWorkspace.
	WorkspaceBytes int64
	// LogBytes bounds the output the engine keeps of a container (the
	// renter gets all of it as it comes). Zero: DefaultLogBytes.
	LogBytes int64
	// Images are the provider's rules for Image, applied by Check.
	Images ImagePolicy
	// Inputs are tars to unpack in the container, in order, before its
	// command starts. A Docker job then starts under /bin/sh, which waits
	// for them and then runs the command as the image would (the image
	// needs sh and tar); the process executor takes none.
	Inputs []Input
	// Outputs are packed as tars, each given to its Save, once the job's
	// command has ended and before the container goes (it waits up to
	// OutputsWait for them). Under /bin/sh too, as for Inputs.
	Outputs []OutputPath
	// Mounts are folders of the provider's the job reads, never writes:
	// a Docker job at each Target, bound read-only; a process job, which
	// has no container, through a link at $HOME followed by Target.
	Mounts []Mount
}

// Mount is a folder of the provider's (Source) a job reads at Target;
// or, with Fill, a folder in the job's memory alone, of Bytes at most,
// filled with the tar Fill gives before the job starts (an encrypted
// dataset, decrypted as it is read: it never touches the disk; of one
// file, the file in the folder).
type Mount struct {
	Source, Target string
	Fill           func() (io.ReadCloser, error)
	Bytes          int64
}

// OutputPath is a file or folder in /workspace to pack as a tar (its top
// entry named by its base) for Save, which reads the tar to its end.
type OutputPath struct {
	Path string
	Save func(tar io.Reader) error
}

// Collector is an executor whose adopted jobs can pack their outputs:
// a job adopted after a restart knows nothing of its lease's outputs, so
// the provider passes them again.
type Collector interface {
	Collect(j Job, leaseID string, outputs []OutputPath)
}

// OutputsWait is how long a job whose command ended waits for its
// outputs to be packed before its container exits anyway.
const OutputsWait = 5 * time.Minute

// Input is a tar to unpack at Dir, a folder in /workspace (made if need
// be), as the job's user.
type Input struct {
	Dir  string
	Open func() (io.ReadCloser, error)
}

// Defaults of a Spec's confinement.
const (
	// DefaultUser is nobody: a workload never runs as root unless asked.
	DefaultUser      = "65534:65534"
	DefaultWorkspace = 1 << 30
	DefaultLogBytes  = 10 << 20
	// TmpBytes bounds a container's /tmp.
	TmpBytes = 64 << 20
	// OpenFiles is the file-descriptor limit of a workload.
	OpenFiles = 4096
)

// Output receives a job's output as it is written, stdout and stderr apart.
type Output struct {
	Stdout io.Writer
	Stderr io.Writer
}

// Offsets are places in a job's output: a count of bytes of its stdout
// and one of its stderr, each from the job's first byte.
type Offsets struct{ Stdout, Stderr int64 }

// Job is one running workload.
type Job interface {
	// ID is the executor's own name for it (container ID, process ID).
	ID() string
	// Wait blocks until the workload exits (or ctx ends) and returns its
	// exit code. Output has been fully written when Wait returns nil.
	Wait(ctx context.Context) (exitCode int, err error)
	// Stop ends the workload: SIGTERM, then after grace SIGKILL, then
	// removes what it left (the container). Safe to call more than once
	// and after the workload exited by itself.
	Stop(ctx context.Context, grace time.Duration) error
}

// Executor starts workloads.
type Executor interface {
	// Name says which executor this is ("docker", "process").
	Name() string
	// Check refuses a spec this executor cannot run, before any lease is
	// signed: an image its rules refuse (ErrImageRefused) or that is not
	// present (ErrUnknownImage), an empty command for a process, GPUs
	// requested from an engine without them.
	Check(ctx context.Context, s Spec) error
	// Start runs s, streaming its output to out until it exits.
	Start(ctx context.Context, s Spec, out Output) (Job, error)
	// Adopt finds a workload started earlier for leaseID (by this or a
	// previous process of the provider) and returns it, with out receiving
	// its output from the offsets from on: what it wrote since a provider
	// last saw it, and what it writes next. ErrNotFound if there is none.
	// Offsets count from the first byte the executor keeps: for a job
	// that wrote more than Spec.LogBytes, whose oldest output an engine
	// dropped, they count short.
	Adopt(ctx context.Context, leaseID string, from Offsets, out Output) (Job, error)
	// Logs writes to out what the executor kept of leaseID's output
	// between the offsets from and to (a part of the output it no longer
	// keeps is skipped), and returns the offsets at the end of what it
	// keeps. ErrNotFound if it keeps no output of leaseID.
	Logs(ctx context.Context, leaseID string, from, to Offsets, out Output) (Offsets, error)
	// Running lists the lease IDs of workloads this executor started and
	// that still exist (running or exited but not removed).
	Running(ctx context.Context) ([]string, error)
	// Close releases the executor's connections; it leaves jobs running.
	Close() error
}
