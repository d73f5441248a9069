package executor

// dockerConfig is what the options of NewDocker set.
type dockerConfig struct {
	host    string
	prefix  string
	noNetns bool
	slack   int64
}

// DockerOption configures NewDocker.
type DockerOption func(*dockerConfig)

// DockerHost sets the engine's address ("unix:///var/run/docker.sock",
// "tcp://host:2376"); by default DOCKER_HOST, or the local unix socket.
func DockerHost(host string) DockerOption {
	return func(c *dockerConfig) { c.host = host }
}

// LabelPrefix replaces DefaultLabelPrefix, so that two providers sharing
// one engine do not adopt each other's containers.
func LabelPrefix(prefix string) DockerOption {
	return func(c *dockerConfig) { c.prefix = prefix }
}

// PortsByRelay makes DialPort reach a job's ports through the image's nc
// only, as a daemon that may not enter the container's network (one not
// running as root) does.
func PortsByRelay() DockerOption {
	return func(c *dockerConfig) { c.noNetns = true }
}

// DiskSlack sets how far beyond the bounds of the fetches under way the
// free space of the engine's disk may fall before a fetch is ended
// (diskSlack, 256 MiB, by default): the disk is shared with the
// provider's other work, whose writes and deletions move it too.
func DiskSlack(bytes int64) DockerOption {
	return func(c *dockerConfig) { c.slack = bytes }
}
