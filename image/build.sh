#!/usr/bin/env bash
# Builds the one image of diskferry's operator and workers, with nothing pulled from an image
# registry: a Debian bookworm root made by mmdebstrap through this machine's apt sources, with
# the packages in image/packages and the project's wheel in a venv at /opt/diskferry, made one
# OCI layer by umoci, written as an OCI archive and loaded into podman's store.
#
# usage: image/build.sh [BUILD_DIR]        (default: build/ in the repository)
# It prints the archive's path and the image's name, localhost/diskferry:VERSION, last.
# PYTHON builds the wheels (default .venv/bin/python); IMAGE_SOURCE sets the source label
# (default: pyproject.toml's project.urls.Source, wherever this checkout was cloned from);
# CONTAINERS_CONF defaults to image/containers.conf.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
build=$(mkdir -p "${1:-$repo/build}" && cd "${1:-$repo/build}" && pwd)
python=${PYTHON:-$repo/.venv/bin/python}
export CONTAINERS_CONF=${CONTAINERS_CONF:-$here/containers.conf}

uid=65532 # the image's user, diskferry, as Kubernetes' runAsNonRoot can check it: a number
home=/var/lib/diskferry
venv=/opt/diskferry

project() { # a value of pyproject.toml's [project] table, by its path of keys
	"$python" -c 'import sys, tomllib
value = tomllib.load(open(sys.argv[1], "rb"))["project"]
for key in sys.argv[2:]: value = value[key]
print(value)' "$repo/pyproject.toml" "$@"
}
version=$(project version)
# the tracked files as they are now: HEAD, or a commit of the uncommitted changes on top of it
snapshot=$(git -C "$repo" -c user.name=diskferry -c user.email=diskferry@localhost stash create)
revision=$(git -C "$repo" rev-parse HEAD)${snapshot:+-dirty}
source=${IMAGE_SOURCE:-$(project urls Source)}
created=$(git -C "$repo" log -1 --format=%cI HEAD)
name=localhost/diskferry:$version
archive=$build/diskferry-$version.oci.tar
work=$build/image
rm -rf "$work" "$archive"
mkdir -p "$work/src"

echo "diskferry $version ($revision): wheels" >&2
git -C "$repo" archive "${snapshot:-HEAD}" | tar -x -C "$work/src"
"$python" -m pip wheel -q --disable-pip-version-check --wheel-dir "$work/wheels" "$work/src" pip

echo "diskferry $version: root" >&2
sources=/etc/apt/sources.list.d/debian.sources
[ -f "$sources" ] || sources=/etc/apt/sources.list
mmdebstrap --quiet --variant=essential --format=tar \
	--include="$(grep -v '^#' "$here/packages" | paste -sd,)" \
	--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
	--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
	--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/lintian/*' \
	--customize-hook="copy-in $work/wheels /tmp" \
	--customize-hook="chroot \"\$1\" python3 -m venv --without-pip $venv" \
	--customize-hook="chroot \"\$1\" $venv/bin/python /tmp/wheels/$(cd "$work/wheels" && ls pip-*.whl)/pip \
		install -q --isolated --no-index --find-links /tmp/wheels diskferry" \
	--customize-hook='rm -rf "$1"/tmp/wheels "$1"/var/cache/* "$1"/var/log/*' \
	--customize-hook="echo 'diskferry:x:$uid:$uid:diskferry:$home:/usr/sbin/nologin' >>\"\$1\"/etc/passwd" \
	--customize-hook="echo 'diskferry:x:$uid:' >>\"\$1\"/etc/group" \
	--customize-hook="install -d -m 0700 -o $uid -g $uid \"\$1\"$home" \
	bookworm "$work/root.tar" "$sources" </dev/null

echo "diskferry $version: image" >&2
layout=$work/oci:$version
umoci init --layout "$work/oci"
umoci new --image "$layout"
umoci raw add-layer --image "$layout" --history.created "$created" \
	--history.created_by "image/build.sh: mmdebstrap bookworm, diskferry $version" "$work/root.tar"
umoci config --image "$layout" --no-history --created "$created" --os linux --architecture amd64 \
	--config.user "$uid:$uid" --config.workingdir "$home" --config.entrypoint diskferry \
	--config.env "PATH=$venv/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
	--config.label "org.opencontainers.image.title=diskferry" \
	--config.label "org.opencontainers.image.description=diskferry's operator and workers" \
	--config.label "org.opencontainers.image.source=$source" \
	--config.label "org.opencontainers.image.version=$version" \
	--config.label "org.opencontainers.image.revision=$revision" \
	--config.label "org.opencontainers.image.created=$created"
skopeo copy --quiet "oci:$layout" "oci-archive:$archive:$name"
podman load --quiet --input "$archive" >/dev/null # named by the archive's ref.name: $name
rm -rf "$work"
echo "$archive"
echo "$name"
