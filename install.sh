#!/usr/bin/env bash
# Builds cproxy and git-credential-cproxy from this checkout and installs them
# into ${PREFIX:-$HOME/.local}/bin, and the cproxy(1) man page into
# ${PREFIX:-$HOME/.local}/share/man/man1. Downloads nothing but Go modules.
set -euo pipefail

prefix=${PREFIX:-$HOME/.local}
bin=$prefix/bin
man1=$prefix/share/man/man1
need_major=1 need_minor=26

if ! command -v go >/dev/null 2>&1; then
	echo "install.sh: Go is not installed (or not on PATH)." >&2
	echo "install.sh: hint: install Go ${need_major}.${need_minor} or later (https://go.dev/doc/install), then run ./install.sh again" >&2
	exit 1
fi
v=$(go env GOVERSION) # e.g. go1.26.8
v=${v#go}
major=${v%%.*} rest=${v#*.} minor=${rest%%.*}
if [ "$major" -lt "$need_major" ] || { [ "$major" -eq "$need_major" ] && [ "${minor%%[!0-9]*}" -lt "$need_minor" ]; }; then
	echo "install.sh: Go $v is too old: cproxy needs Go ${need_major}.${need_minor} or later" >&2
	exit 1
fi

cd "$(dirname "$0")"
version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
mkdir -p "$bin" "$man1"
for cmd in cproxy git-credential-cproxy; do
	go build -trimpath -ldflags "-X main.buildVersion=$version" -o "$bin/$cmd" "./cmd/$cmd"
done
cp docs/man/cproxy.1 "$man1/cproxy.1"
echo "installed cproxy and git-credential-cproxy ($version) into $bin"
echo "installed the cproxy(1) man page into $man1"
case ":$PATH:" in
*":$bin:"*) ;;
*) echo "note: $bin is not on your PATH; add it with: export PATH=\"$bin:\$PATH\"" ;;
esac
