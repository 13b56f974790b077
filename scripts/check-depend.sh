#!/usr/bin/env bash
# Checks the README's "Depending on flightlog" recipe the way a program outside
# this repository meets it: through a module proxy. It serves the core and
# contrib/prometheus from a file-based GOPROXY at the pseudo-version of the
# current commit (uncommitted changes to tracked files included), then, in a
# fresh module, runs the README's commands and builds and runs a program that
# imports loglet and flightprom.
#
# Usage: scripts/check-depend.sh           # offline: other modules come from the local module cache
#        scripts/check-depend.sh -online   # other modules come from `go env GOPROXY` (needs the network)
# The offline run needs the core's and contrib/prometheus's dependencies in the
# module cache (a run of scripts/test.sh puts them there); scripts/test.sh runs it.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD
log() { printf 'check-depend.sh: %s\n' "$*" >&2; }

online=false
case ${1:-} in
'') ;;
-online) online=true ;;
*) log "usage: scripts/check-depend.sh [-online]"; exit 2 ;;
esac

work=$(mktemp -d "${TMPDIR:-/tmp}/flightlog-depend.XXXXXX")
cleanup() {
	chmod -R u+w "$work" 2>/dev/null || true # the module cache is read-only
	rm -rf "$work"
}
trap cleanup EXIT

core=github.com/flightlog/flightlog
prom=$core/contrib/prometheus
cache=$(go env GOMODCACHE)
if $online; then
	fallback=$(go env GOPROXY)
else
	fallback=file://$cache/cache/download
fi

# pseudo COMMIT: the pseudo-version a module proxy gives COMMIT (no tags yet).
pseudo() {
	echo "v0.0.0-$(TZ=UTC git show -s --format=%cd --date=format-local:%Y%m%d%H%M%S "$1")-$(git rev-parse --short=12 "$1")"
}
# The commit: HEAD, or a commit of the working tree when tracked files changed.
commit=$(git stash create 2>/dev/null || true)
commit=${commit:-$(git rev-parse HEAD)}
version=$(pseudo "$commit")
# The core version contrib/prometheus's go.mod requires (a lower bound: inside
# the repository its replace directive overrides it) must be a pseudo-version
# of a commit of this repository, or no proxy can serve it.
floor=$(git show "$commit:contrib/prometheus/go.mod" | awk -v m="$core" '$1 == m && $2 ~ /^v/ { print $2; exit }')
floor_commit=$(git rev-parse --verify -q "${floor##*-}^{commit}" || true)
if [ -z "$floor_commit" ] || [ "$(pseudo "$floor_commit")" != "$floor" ]; then
	log "contrib/prometheus/go.mod requires $core $floor: not the pseudo-version of a commit here (want the form $(pseudo HEAD))"
	exit 1
fi
# The same holds for every module of its own in the repository.
while IFS= read -r mod; do
	v=$(git show "$commit:$mod" | awk -v m="$core" '$1 == m && $2 ~ /^v/ { print $2; exit }')
	[ -n "$v" ] || continue
	c=$(git rev-parse --verify -q "${v##*-}^{commit}" || true)
	if [ -z "$c" ] || [ "$(pseudo "$c")" != "$v" ]; then
		log "$mod requires $core $v: not the pseudo-version of a commit here (want the form $(pseudo HEAD))"
		exit 1
	fi
done < <(git ls-tree -r --name-only "$commit" | grep '/go.mod$')
log "serving $core and $prom at $version (commit $commit), and $core at $floor"

# ---- the file proxy ----------------------------------------------------------
mkdir -p "$work/src" "$work/proxy" "$work/mkzip"
git archive "$commit" | tar -x -C "$work/src"
# A module's zip holds its directory's files under <module>@<version>/, without
# the subdirectories that are modules of their own.
cat >"$work/mkzip/main.go" <<'GO'
package main

import (
	"archive/zip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

func main() {
	dir, prefix, out := os.Args[1], os.Args[2], os.Args[3]
	f, err := os.Create(out)
	check(err)
	zw := zip.NewWriter(f)
	check(filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			if rel != "." {
				if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file (a module zip holds only regular files)", p)
		}
		w, err := zw.Create(prefix + filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		r, err := os.Open(p)
		if err != nil {
			return err
		}
		defer r.Close()
		_, err = io.Copy(w, r)
		return err
	}))
	check(zw.Close())
	check(f.Close())
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkzip:", err)
		os.Exit(1)
	}
}
GO
printf 'module mkzip\n\ngo 1.26.0\n' >"$work/mkzip/go.mod"
(cd "$work/mkzip" && GOFLAGS= go build -o mkzip .)

serve() { # serve MODULE DIR COMMIT
	local d=$work/proxy/$1/@v v info
	v=$(pseudo "$3")
	info=$(printf '{"Version":"%s","Time":"%s"}' "$v" "$(TZ=UTC git show -s --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ "$3")")
	mkdir -p "$d"
	echo "$v" >>"$d/list"
	printf '%s\n' "$info" >"$d/$v.info"
	printf '%s\n' "$info" >"$work/proxy/$1/@latest"
	# A query by commit (@<hash>) asks the proxy for <hash>.info.
	printf '%s\n' "$info" >"$d/$3.info"
	printf '%s\n' "$info" >"$d/${3:0:12}.info"
	cp "$2/go.mod" "$d/$v.mod"
	"$work/mkzip/mkzip" "$2" "$1@$v/" "$d/$v.zip"
}
if [ "$floor_commit" != "$commit" ]; then
	mkdir -p "$work/floor"
	git archive "$floor_commit" | tar -x -C "$work/floor"
	serve "$core" "$work/floor" "$floor_commit"
fi
serve "$core" "$work/src" "$commit"
serve "$prom" "$work/src/contrib/prometheus" "$commit"

# ---- a program outside the repository ----------------------------------------
# A module cache of its own, so that the served pseudo-version never enters the
# real one; the sum database does not know the served modules.
export GOPROXY="file://$work/proxy,$fallback"
export GOMODCACHE=$work/modcache
export GONOSUMDB=$core
export GOFLAGS=
export GOWORK=off
if ! $online; then
	export GOSUMDB=off # offline: no sum database to ask about the others
fi
mkdir -p "$work/app"
cd "$work/app"
cat >main.go <<'GO'
package main

import (
	"fmt"

	flightprom "github.com/flightlog/flightlog/contrib/prometheus"
	"github.com/flightlog/flightlog/loglet"
)

func main() {
	var newCollector func(*loglet.Star, ...flightprom.Option) *flightprom.Collector = flightprom.New
	fmt.Println("loglet and flightprom linked:", newCollector != nil)
}
GO
run() { log "\$ $*"; "$@"; }
# go build -trimpath: the build cache then keys the dependencies by module
# version, not by this run's module cache directory, so a second run reuses
# them (about 30 s, not 3-4 minutes, on a busy 2-core machine).
run go mod init example.com/app
# The README's commands, with <commit> the commit served above.
run go get "$core@$commit" "$prom@$commit"
run go mod tidy
run go build -trimpath -o app .
./app
got=$(go list -m -f '{{.Version}}' "$core")
[ "$got" = "$version" ] || { log "the program builds on $core $got, want $version"; exit 1; }

# The README's other way: a local checkout, named by paths.
mkdir -p "$work/local"
cd "$work/local"
cp "$work/app/main.go" .
run go mod init example.com/local
run go mod edit -replace "$core=$work/src" -replace "$prom=$work/src/contrib/prometheus"
run go mod tidy
run go build -trimpath -o app .
./app
log "ok: the recipe builds a program on $core and $prom at $version"
