#!/usr/bin/env bash
# Builds the two base images the Dockerfile beside this script needs, from
# this machine's own files, for a site that reaches no registry (an
# air-gapped rack, CI):
#
#   idlegrid-local/go       the Go toolchain at $(go env GOROOT) and the C
#                           toolchain of Debian's gcc (cgo, for go-nvml),
#                           with every package they depend on
#   idlegrid-local/runtime  Debian's libc6 (the daemon links glibc) and a
#                           nonroot user 65532
#
# Then build the daemon's image with them, from a context that holds the
# module's dependencies (go mod vendor), offline:
#
#   examples/docker/local-bases.sh
#   ctx=$(mktemp -d) && git archive HEAD | tar -x -C "$ctx" && go mod vendor -o "$ctx/vendor"
#   DOCKER_BUILDKIT=0 docker build -f "$ctx/examples/docker/Dockerfile" -t idlegrid \
#     --build-arg GO_IMAGE=idlegrid-local/go --build-arg RUNTIME_IMAGE=idlegrid-local/runtime \
#     --build-arg GOFLAGS=-mod=vendor "$ctx"
#
# Needs a Debian machine with go, gcc, dpkg and a Docker engine. Prints
# the two image names. --force builds them again when they exist.
set -euo pipefail

go_image=idlegrid-local/go
runtime_image=idlegrid-local/runtime
force=no
case "${1:-}" in
  "") ;;
  --force) force=yes ;;
  *) echo "usage: $0 [--force]" >&2; exit 2 ;;
esac
for tool in go gcc dpkg-query apt-cache docker tar; do
  command -v "$tool" >/dev/null || { echo "$0: $tool not found: this script needs a Debian machine with go, gcc and a Docker engine" >&2; exit 1; }
done

exists() { docker image inspect "$1" >/dev/null 2>&1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# files PACKAGE... lists the regular files and links the installed packages
# hold, documentation aside, as paths relative to / with the merged-/usr
# links (/bin, /lib, ...) resolved, so that each file appears once.
files() {
  dpkg-query -L "$@" 2>/dev/null | while IFS= read -r f; do
    [ -f "$f" ] || [ -L "$f" ] || continue
    case "$f" in /usr/share/doc/* | /usr/share/man/* | /usr/share/info/* | /usr/share/locale/* | /usr/share/lintian/*) continue ;; esac
    for top in bin sbin lib lib32 lib64 libx32; do
      if [ -L "/$top" ] && [[ "$f" == "/$top/"* ]]; then
        f="/usr${f}"
        break
      fi
    done
    printf '%s\n' "${f#/}"
  done | sort -u
}

# installed PACKAGE... is the installed packages among those named and
# everything they depend on.
installed() {
  apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances "$@" 2>/dev/null |
    grep -v '^[ <]' | sort -u | while read -r p; do
      [ "$(dpkg-query -W -f '${db:Status-Status}' "$p" 2>/dev/null)" = installed ] && echo "$p"
    done
}

# The top-level links of a merged /usr.
roots() {
  for top in bin sbin lib lib32 lib64 libx32; do
    [ -L "/$top" ] && echo "$top"
  done
  return 0
}

import() { # import NAME TARFILE|- CHANGE...
  local name=$1 tarball=$2
  shift 2
  local changes=()
  for c in "$@"; do changes+=(--change "$c"); done
  docker import "${changes[@]}" "$tarball" "$name" >/dev/null
}

if [ "$force" = yes ] || ! exists "$go_image"; then
  root="$work/go"
  mkdir -p "$root/etc" "$root/root" "$root/tmp" "$root/usr/local/go"
  chmod 1777 "$root/tmp"
  printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
  printf 'root:x:0:\n' >"$root/etc/group"
  # shellcheck disable=SC2046
  files $(installed gcc cpp libc6-dev dash coreutils) >"$work/go.list"
  roots >>"$work/go.list"
  tar -C / --no-recursion -cf - -T "$work/go.list" | tar -C "$root" -xf -
  goroot=$(go env GOROOT)
  tar -C "$goroot" --exclude ./test --exclude ./doc -cf - . | tar -C "$root/usr/local/go" -xf -
  tar -C "$root" -cf - . | import "$go_image" - \
    'ENV PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    'ENV HOME=/root' 'ENV GOTOOLCHAIN=local' 'ENV GOPROXY=off'
  rm -rf "$root"
fi
echo "$go_image"

if [ "$force" = yes ] || ! exists "$runtime_image"; then
  mkdir -p "$work/rt/etc" "$work/rt/tmp" "$work/rt/home/nonroot"
  chmod 1777 "$work/rt/tmp"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$work/rt/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$work/rt/etc/group"
  printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$work/rt/etc/nsswitch.conf"
  files libc6 >"$work/rt.list"
  roots >>"$work/rt.list"
  mkdir -p "$work/rt.root"
  tar -C / --no-recursion -cf - -T "$work/rt.list" | tar -C "$work/rt.root" -xf -
  tar -C "$work/rt" -cf - . | tar -C "$work/rt.root" -xf -
  chown 65532:65532 "$work/rt.root/home/nonroot"
  tar -C "$work/rt.root" -cf - . | import "$runtime_image" - 'ENV PATH=/usr/local/bin:/usr/bin:/bin' 'USER 65532:65532'
fi
echo "$runtime_image"
