package config

import (
	"fmt"
	"regexp"
	"time"

	"github.com/idlegrid/idlegrid/node/executor"
	"github.com/idlegrid/idlegrid/p2p"
)

// Executors a provider may run leases with.
const (
	ExecutorDocker  = "docker"
	ExecutorProcess = "process"
	ExecutorNone    = "none"
)

// JobsConfig is the [jobs] section: how a provider runs leased workloads
// and meters them.
type JobsConfig struct {
	Executor          string   `toml:"executor" comment:"how leases run: docker (containers through the Docker Engine API), process (plain processes: private swarms only, by explicit choice) or none (sell nothing that runs)"`
	DockerHost        string   `toml:"docker_host" comment:"Docker Engine API address, such as unix:///var/run/docker.sock; empty: $DOCKER_HOST or the default socket"`
	HeartbeatInterval Duration `toml:"heartbeat_interval" comment:"how often a running lease's signed telemetry beat is taken and sent to the renter"`
	StopGrace         Duration `toml:"stop_grace" comment:"at a lease's end, preemption or cancellation: time between SIGTERM and SIGKILL"`
	RenterGrace       Duration `toml:"renter_grace" comment:"a running lease whose renter has been gone this long is stopped and cancelled"`
	MemoryGiB         int      `toml:"memory_gib" comment:"memory limit of a job when its lease names none, GiB; 0: none"`
	CPUs              int      `toml:"cpus" comment:"CPU limit of a job when its lease names none; 0: none"`
	PIDs              int      `toml:"pids" comment:"process limit of a job when its lease names none; 0: none"`
	PassGPUs          bool     `toml:"pass_gpus" comment:"hand the leased GPUs to the container through a device request (needs NVIDIA's container runtime); set for real GPUs (gpu_source = nvml)"`
	User              string   `toml:"user" comment:"numeric uid[:gid] a container runs as; 65534 is nobody; 0 (root) only if you must"`
	WorkspaceMiB      int      `toml:"workspace_mib" comment:"size of /workspace, a container's one writable folder (its home; the rest of its filesystem is read-only), MiB"`
	LogMiB            int      `toml:"log_mib" comment:"output the engine keeps of a container, MiB (the renter gets all of it as it comes)"`
	Pull              bool     `toml:"pull" comment:"pull the images renters name, when provider.image_allow and image_deny allow them, before their leases (a pull is never billed); false: run only images present"`
	MaxImageGiB       int      `toml:"max_image_gib" comment:"largest image pulled for a renter, GiB, as the registry announces its layers and once unpacked; 0: no bound"`
	PullTimeout       Duration `toml:"pull_timeout" comment:"longest one pull may take"`
	PullsPerHour      int      `toml:"pulls_per_hour" comment:"pulls a renter starts per hour (a burst of 5 first), failing ones and images it sends counted too; images present already do not count; each renter has its own"`
	ImageDiskGiB      int      `toml:"image_disk_gib" comment:"disk for the images fetched for renters (pulled or sent), GiB on disk, all renters together; the least lately used that no lease uses make room for a new fetch"`
	ImageRenterGiB    int      `toml:"image_renter_gib" comment:"disk for the images fetched for one renter, GiB on disk, at most image_disk_gib; a fetch is bounded by what its renter has left"`
	ImageKeep         Duration `toml:"image_keep" comment:"an image fetched for a renter is removed this long after a lease last used it (or its fetch), unless a container uses it or the provider gave it a name of its own"`
	LoadImages        bool     `toml:"load_images" comment:"take images renters send from their own engines (rent --image-from-docker), under the same rules and bounds as pulls"`
	MaxUploadMiB      int      `toml:"max_upload_mib" comment:"largest tar of data a renter uploads for a lease (rent --upload), and largest output it downloads, MiB, at most workspace_mib, where it is unpacked; a renter keeps twice that here, uploads and outputs together, tars for an hour and outputs for a day; 0: no uploads"`
	MaxStageGiB       int      `toml:"max_stage_gib" comment:"disk all renters' uploads and outputs may take here together, GiB, at least four times max_upload_mib; renters with no lease here share half of it"`
}

// DefaultJobsConfig runs containers with modest default limits.
func DefaultJobsConfig() JobsConfig {
	return JobsConfig{
		Executor:          ExecutorDocker,
		HeartbeatInterval: Dur(5 * time.Second),
		StopGrace:         Dur(10 * time.Second),
		RenterGrace:       Dur(30 * time.Second),
		MemoryGiB:         16,
		CPUs:              4,
		PIDs:              1024,
		User:              executor.DefaultUser,
		WorkspaceMiB:      executor.DefaultWorkspace >> 20,
		LogMiB:            executor.DefaultLogBytes >> 20,
		Pull:              true,
		MaxImageGiB:       40,
		PullTimeout:       Dur(30 * time.Minute),
		PullsPerHour:      30,
		ImageDiskGiB:      200,
		ImageRenterGiB:    80,
		ImageKeep:         Dur(24 * time.Hour),
		LoadImages:        true,
		MaxUploadMiB:      executor.DefaultWorkspace >> 20,
		MaxStageGiB:       16,
	}
}

var numericUser = regexp.MustCompile(`^[0-9]{1,10}(:[0-9]{1,10})?$`)

func (c *Config) validateJobs() error {
	j := c.Jobs
	if err := oneOf("jobs.executor", j.Executor, []string{ExecutorDocker, ExecutorProcess, ExecutorNone}); err != nil {
		return err
	}
	if j.Executor == ExecutorProcess && c.Swarm.KeyFile == "" {
		return FieldErr("jobs.executor", j.Executor, "docker or none in the public swarm: plain processes run only in a private swarm (swarm.key_file set)")
	}
	for _, d := range []struct {
		name   string
		v      Duration
		lo, hi time.Duration
	}{
		{"jobs.heartbeat_interval", j.HeartbeatInterval, 100 * time.Millisecond, 10 * time.Minute},
		{"jobs.stop_grace", j.StopGrace, 0, 10 * time.Minute},
		{"jobs.renter_grace", j.RenterGrace, time.Second, time.Hour},
		{"jobs.pull_timeout", j.PullTimeout, 10 * time.Second, p2p.MaxPullDeadline},
		{"jobs.image_keep", j.ImageKeep, time.Minute, 30 * 24 * time.Hour},
	} {
		if err := durRange(d.name, d.v, d.lo, d.hi); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"jobs.memory_gib", j.MemoryGiB}, {"jobs.cpus", j.CPUs}, {"jobs.pids", j.PIDs}, {"jobs.max_image_gib", j.MaxImageGiB}} {
		if err := intRange(f.name, f.v, 0, 1<<20); err != nil {
			return err
		}
	}
	if err := intRange("jobs.pulls_per_hour", j.PullsPerHour, 1, 1<<20); err != nil {
		return err
	}
	if err := intRange("jobs.image_disk_gib", j.ImageDiskGiB, 1, 1<<20); err != nil {
		return err
	}
	if err := intRange("jobs.image_renter_gib", j.ImageRenterGiB, 1, j.ImageDiskGiB); err != nil {
		return err
	}
	if !numericUser.MatchString(j.User) {
		return FieldErr("jobs.user", j.User, `a numeric uid or uid:gid, such as "65534" or "1000:1000"`)
	}
	if err := intRange("jobs.workspace_mib", j.WorkspaceMiB, 1, 1<<20); err != nil {
		return err
	}
	if err := intRange("jobs.max_upload_mib", j.MaxUploadMiB, 0, j.WorkspaceMiB); err != nil {
		return err
	}
	// A renter with no lease here keeps up to twice the largest tar, in
	// half of the stage.
	if least := max(1, (4*j.MaxUploadMiB+1023)>>10); j.MaxStageGiB < least || j.MaxStageGiB > 1<<20 {
		return FieldErr("jobs.max_stage_gib", j.MaxStageGiB, fmt.Sprintf("%d to %d: at least four times jobs.max_upload_mib (%d MiB)", least, 1<<20, j.MaxUploadMiB))
	}
	return intRange("jobs.log_mib", j.LogMiB, 1, 1<<14)
}
