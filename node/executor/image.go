package executor

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"
)

// BusyboxImage is the image EnsureBusybox makes: the host's static
// busybox with every applet linked into /bin, and PATH=/bin. Tests and
// the devstack run it, since no registry may be reachable.
const BusyboxImage = "idlegrid-test/busybox:1"

// BusyboxPath is the static busybox the image is built from (Debian's
// busybox-static package).
const BusyboxPath = "/bin/busybox"

// EnsureBusybox makes sure BusyboxImage is present on the engine,
// importing it from BusyboxPath when it is not, and returns its name.
func (d *Docker) EnsureBusybox(ctx context.Context) (string, error) {
	_, err := d.cli.ImageInspect(ctx, BusyboxImage)
	if err == nil {
		return BusyboxImage, nil
	}
	if !cerrdefs.IsNotFound(err) {
		return "", d.engineErr("inspect "+BusyboxImage, err)
	}
	rootfs, err := busyboxRootfs()
	if err != nil {
		return "", fmt.Errorf("build %s: %w", BusyboxImage, err)
	}
	resp, err := d.cli.ImageImport(ctx, image.ImportSource{Source: bytes.NewReader(rootfs), SourceName: "-"}, BusyboxImage,
		image.ImportOptions{Changes: []string{"ENV PATH=/bin"}})
	if err != nil {
		return "", fmt.Errorf("import %s: %w", BusyboxImage, err)
	}
	msg, _ := io.ReadAll(resp)
	resp.Close()
	if _, err := d.cli.ImageInspect(ctx, BusyboxImage); err != nil {
		return "", fmt.Errorf("import %s: not present afterwards (%v); engine said: %s", BusyboxImage, err, msg)
	}
	return BusyboxImage, nil
}

// busyboxRootfs returns a tar of /bin/busybox, a symlink to it for each of
// its applets, and an empty /tmp.
func busyboxRootfs() ([]byte, error) {
	bin, err := staticBusybox()
	if err != nil {
		return nil, err
	}
	list, err := exec.Command(BusyboxPath, "--list").Output()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdrs := []*tar.Header{
		{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777},
		{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bin))},
	}
	for _, applet := range strings.Fields(string(list)) {
		if applet != "busybox" && !strings.Contains(applet, "/") {
			hdrs = append(hdrs, &tar.Header{Name: "bin/" + applet, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777})
		}
	}
	for _, h := range hdrs {
		h.ModTime = time.Unix(0, 0)
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Name == "bin/busybox" {
			if _, err := tw.Write(bin); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// staticBusybox reads BusyboxPath and refuses a dynamically linked one,
// which could not run in an image with no libc.
func staticBusybox() ([]byte, error) {
	bin, err := os.ReadFile(BusyboxPath)
	if err != nil {
		return nil, err
	}
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return nil, errNotStatic
		}
	}
	return bin, nil
}

var errNotStatic = errors.New(BusyboxPath + " is dynamically linked: apt-get install -y busybox-static")
