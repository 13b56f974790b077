#!/usr/bin/env bash
# The whole test suite: formatting, vet, and every package's tests with the
# race detector, the real-server tests included. It installs and starts what
# they need on 127.0.0.1 and stops it at the end:
#   - versitygw (S3-compatible, posix backend), built with `go install` and
#     cached under $HOME/.cache/flightlog/tools (the cache is never required);
#   - etcd (from PATH, else the distribution's etcd-server package);
#   - fake-gcs-server (a GCS emulator, `go install`ed) and Azurite's blob
#     service (an Azure Blob emulator, `npm install`ed; needs node and npm),
#     for contrib/gocloud, cached beside versitygw.
#
# Usage: scripts/test.sh [go test args...]
#   scripts/test.sh                              # everything: -race -count=1 ./...
#   scripts/test.sh -run Conformance ./objstore/...
#   FLIGHTLOG_RACE=0 scripts/test.sh -run XXX -bench . ./objstore/...   # benchmarks
# Extra args replace the default package list ./... when they name packages.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD

# versitygw's and etcd's start-up (VERSITYGW_VERSION, TOOLS_ROOT, free_port,
# wait_for, start_versitygw, start_etcd, ...), shared with scripts/perftable.sh.
# shellcheck source=scripts/servers.sh
. "$root/scripts/servers.sh"
FAKE_GCS_VERSION=v1.56.1
AZURITE_VERSION=3.35.0 # the last release whose engines allow Node 20
work=$(mktemp -d "${TMPDIR:-/tmp}/flightlog-test.XXXXXX")
pids=()

log() { printf 'test.sh: %s\n' "$*" >&2; }

cleanup() {
	rc=$?
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	if [ "$rc" -ne 0 ]; then
		for f in "$work"/*.log; do
			[ -s "$f" ] || continue
			log "---- $(basename "$f") (last 50 lines) ----"
			tail -n 50 "$f" >&2
		done
		log "FAILED (exit $rc)"
	fi
	rm -rf "$work"
	exit "$rc"
}
trap cleanup EXIT

# ---- static checks -------------------------------------------------------
log "gofmt and go vet"
unformatted=$(gofmt -l . | grep -v '^\.git/' || true)
if [ -n "$unformatted" ]; then
	log "gofmt needed on:"
	printf '%s\n' "$unformatted" >&2
	exit 1
fi
go vet ./...
# go.mod hygiene, in the core and every module of its own: tidy (so a
# direct dependency is never marked // indirect, and nothing unused is
# required), and a go directive that does not force downstream modules
# onto a patch release (go 1.N or 1.N.0).
while IFS= read -r mod; do
	d=$(dirname "$mod")
	(cd "$d" && go mod tidy -diff >/dev/null) || { log "go mod tidy needed in $d (go mod tidy -diff shows what)"; exit 1; }
	if ! grep -Eq '^go [0-9]+\.[0-9]+(\.0)?$' "$mod"; then
		log "$mod: the go directive names a patch release ($(grep -E '^go ' "$mod")): use go 1.N.0"
		exit 1
	fi
done < <(find . -name go.mod -not -path './.git/*' | sort)

# ---- versitygw and etcd ---------------------------------------------------
start_versitygw "$work"
start_etcd "$work"

# ---- fake-gcs-server and Azurite (contrib/gocloud) ------------------------
gcs_tools=$TOOLS_ROOT/fake-gcs-server-$FAKE_GCS_VERSION
if [ ! -x "$gcs_tools/fake-gcs-server" ]; then
	log "building fake-gcs-server $FAKE_GCS_VERSION into $gcs_tools (first run only)"
	mkdir -p "$gcs_tools"
	(cd "$work" && GOFLAGS= GOBIN="$gcs_tools" go install "github.com/fsouza/fake-gcs-server@$FAKE_GCS_VERSION")
fi
az_tools=$TOOLS_ROOT/azurite-$AZURITE_VERSION
if [ ! -x "$az_tools/node_modules/.bin/azurite-blob" ]; then
	command -v npm >/dev/null || { log "npm is needed to install Azurite (the Azure Blob emulator): install Node.js 20 or later"; exit 1; }
	log "installing azurite $AZURITE_VERSION into $az_tools (first run only)"
	# Into a scratch directory first, so an interrupted install is never
	# taken for a cached one.
	mkdir -p "$work/azurite-install" "$TOOLS_ROOT"
	npm install --prefix "$work/azurite-install" --no-audit --no-fund --omit=dev --loglevel=error \
		"azurite@$AZURITE_VERSION" >"$work/npm.log" 2>&1 || { cat "$work/npm.log" >&2; exit 1; }
	rm -rf "$az_tools"
	mv "$work/azurite-install" "$az_tools"
fi

gcs_port=$(free_port)
"$gcs_tools/fake-gcs-server" -scheme http -host 127.0.0.1 -port "$gcs_port" -backend memory \
	-public-host "127.0.0.1:$gcs_port" -external-url "http://127.0.0.1:$gcs_port" -log-level error \
	>"$work/fake-gcs-server.log" 2>&1 &
pids+=($!)
az_port=$(free_port)
mkdir -p "$work/azurite"
(cd "$work/azurite" && exec "$az_tools/node_modules/.bin/azurite-blob" --blobHost 127.0.0.1 --blobPort "$az_port" \
	--inMemoryPersistence --extentMemoryLimit 1024 --loose --skipApiVersionCheck --disableTelemetry --silent) \
	>"$work/azurite.log" 2>&1 &
pids+=($!)

# ---- wait until all answer -----------------------------------------------
wait_versitygw
wait_etcd
gcs_up() { curl -sf "http://127.0.0.1:$gcs_port/storage/v1/b" >/dev/null; }
az_up() { # Azurite answers an unsigned request (403 once it is up)
	local code
	code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$az_port/devstoreaccount1?comp=list") && [ "$code" != 000 ]
}
wait_for "fake-gcs-server on 127.0.0.1:$gcs_port" 20 gcs_up || { alive "${pids[2]}" || log "fake-gcs-server exited"; exit 1; }
wait_for "azurite on 127.0.0.1:$az_port" 30 az_up || { alive "${pids[3]}" || log "azurite exited"; exit 1; }
log "versitygw on 127.0.0.1:$s3_port, etcd on 127.0.0.1:$etcd_port, fake-gcs-server on 127.0.0.1:$gcs_port, azurite on 127.0.0.1:$az_port"

export FLIGHTLOG_S3_ENDPOINT="http://127.0.0.1:$s3_port"
export FLIGHTLOG_S3_ACCESS_KEY=$S3_ACCESS_KEY
export FLIGHTLOG_S3_SECRET_KEY=$S3_SECRET_KEY
export FLIGHTLOG_S3_POSIX_KEYS=1 # versitygw posix stores keys as paths
export FLIGHTLOG_ETCD_ENDPOINTS="http://127.0.0.1:$etcd_port"
export FLIGHTLOG_GCS_ENDPOINT="http://127.0.0.1:$gcs_port"
export FLIGHTLOG_AZURE_ENDPOINT="http://127.0.0.1:$az_port/devstoreaccount1"
export FLIGHTLOG_REQUIRE_SERVERS=1

# ---- tests ---------------------------------------------------------------
args=("$@")
has_pkg=false
for a in "${args[@]}"; do
	case $a in ./* | github.com/*) has_pkg=true ;; esac
done
if ! $has_pkg; then
	args+=(./...)
fi
# FLIGHTLOG_RACE=0 drops the race detector (for benchmarks against the
# real servers: scripts/test.sh -run XXX -bench . ./objstore/...).
race=-race
[ "${FLIGHTLOG_RACE:-1}" = 0 ] && race=
# A package's tests get 25 minutes, not go test's default 10: the
# simulation's seed budgets fit in a few minutes on an idle 2-core machine,
# and a busy one must not fail them for being slow (a hang still ends).
timeout=-timeout=25m
log "go test $race $timeout -count=1 ${args[*]}"
cd "$root"
go test $race $timeout -count=1 "${args[@]}"

# The full run also gives the simulation its larger seed budget: without the
# race detector a seed is ~15x cheaper, so loglet/internal/sim runs seeds 1-300
# (about 4 minutes on two cores) where the race run above ran 1-16.
if ! $has_pkg; then
	# Integrations with heavy dependencies live in modules of their own
	# (each with a replace directive onto this checkout of the core): each
	# is vetted and tested in its own directory, against the same servers.
	while IFS= read -r mod; do
		d=$(dirname "$mod")
		log "go vet and go test $race in $d (a module of its own)"
		(cd "$d" && go vet ./... && go test $race -count=1 ./...)
	done < <(find . -mindepth 2 -name go.mod -not -path './.git/*' | sort)
	# The README's "Depending on flightlog" recipe, through a file-based
	# module proxy; offline, from the module cache the runs above filled
	# (~30 s once its dependencies are in the build cache; the first run
	# compiles them: 3-4 minutes on a busy 2-core machine).
	# It needs the commits the contrib go.mod files name, so a shallow clone
	# skips it (and says so).
	if [ "$(git -C "$root" rev-parse --is-shallow-repository 2>/dev/null)" = true ]; then
		log "scripts/check-depend.sh skipped: a shallow clone lacks the commits the contrib go.mod files name"
	else
		log "scripts/check-depend.sh (the README's go get recipe)"
		"$root/scripts/check-depend.sh"
	fi
fi
if ! $has_pkg && [ -n "$race" ]; then
	log "go test -count=1 ./loglet/internal/sim (the non-race seed budget)"
	go test $timeout -count=1 ./loglet/internal/sim
	# Planted bugs and "cannot happen" assertions compile only with
	# -tags invariants (internal/invariants): every planted bug must be
	# caught, and the whole suite of the packages that hold them must pass
	# with the assertions on.
	log "go test -tags invariants (planted bugs, assertions)"
	# The simulation's own seeds run once above; here its planted bugs and
	# 100 seeds with the assertions on (SIM_SEEDS) keep the run short.
	SIM_SEEDS=100 go test $timeout -count=1 -tags invariants ./loglet/internal/chaincore ./loglet/internal/work ./loglet ./absorb ./loglet/internal/sim
fi
