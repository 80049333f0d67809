#!/usr/bin/env bash
# Builds cproxy and git-credential-cproxy from this checkout and installs them
# into ${PREFIX:-$HOME/.local}/bin, and the cproxy(1) man page into
# ${PREFIX:-$HOME/.local}/share/man/man1. Downloads nothing but Go modules.
# Says what it does on stderr, a line a step.
set -euo pipefail

prefix=${PREFIX:-$HOME/.local}
bin=$prefix/bin
man1=$prefix/share/man/man1
need_major=1 need_minor=26

say() { echo "install: $*" >&2; }

if ! command -v go >/dev/null 2>&1; then
	say "Go is not installed (or not on PATH)"
	say "hint: install Go ${need_major}.${need_minor} or later (https://go.dev/doc/install), then run ./install.sh again"
	exit 1
fi
v=$(go env GOVERSION) # e.g. go1.26.8
v=${v#go}
major=${v%%.*} rest=${v#*.} minor=${rest%%.*}
if [ "$major" -lt "$need_major" ] || { [ "$major" -eq "$need_major" ] && [ "${minor%%[!0-9]*}" -lt "$need_minor" ]; }; then
	say "Go $v is too old: cproxy needs Go ${need_major}.${need_minor} or later"
	exit 1
fi

cd "$(dirname "$0")"
# In a git checkout Go records the commit, whether uncommitted changes were
# built, and a version made from them (cproxy version prints them):
# -buildvcs=true, even where GOFLAGS turns that off. Go does not know a
# linked worktree (git worktree add), whose .git is a file
# (https://go.dev/issue/58218): there git describe names the build instead.
flags=(-trimpath -buildvcs=true)
if ! command -v git >/dev/null 2>&1; then
	flags=(-trimpath -buildvcs=false)
elif [ -f .git ]; then
	flags=(-trimpath -buildvcs=false -ldflags "-X main.buildVersion=$(git describe --tags --always --dirty 2>/dev/null || echo devel)")
fi
mkdir -p "$bin" "$man1"
say "building cproxy with Go $v (a minute or two on a fresh machine, seconds after that)…"
go build "${flags[@]}" -o "$bin/cproxy" ./cmd/cproxy
say "building git-credential-cproxy…"
go build "${flags[@]}" -o "$bin/git-credential-cproxy" ./cmd/git-credential-cproxy
version=$("$bin/cproxy" --version)
say "installed cproxy and git-credential-cproxy (${version#cproxy version }) into $bin"
cp docs/man/cproxy.1 "$man1/cproxy.1"
say "installed the cproxy(1) man page into $man1"
case ":$PATH:" in
*":$bin:"*) ;;
*) say "note: $bin is not on your PATH; add it with: export PATH=\"$bin:\$PATH\"" ;;
esac
