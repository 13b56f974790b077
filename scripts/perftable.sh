#!/usr/bin/env bash
# Issue 26's performance table, before and after, measured in one run by
# one script. NOT run by CI: it takes 10-40 minutes (hours with
# --million) and its figures mean something only on a quiet machine.
#
# It builds the "before" and "after" test binaries of ./loglet and the
# flightlog CLI, each from a temporary git worktree of its revision, runs
# each row's benchmark with both binaries interleaved (run 1: before,
# after; run 2: before, after; ...), and prints one markdown table of the
# medians with each row's goal, then the raw value of every run. A metric
# a binary does not report (a benchmark or metric added after "before")
# prints as "—". The real-S3 rows start versitygw and etcd on free
# loopback ports (scripts/servers.sh, as scripts/test.sh does) and stop
# them on exit.
#
# Usage: scripts/perftable.sh [options]
#   --before REV      the "before" revision (default 47efe13: issue 26's table)
#   --after REV       the "after" revision (default HEAD; a worktree of the
#                     commit, so uncommitted changes are not measured)
#   --count N         runs of each side (default 3; the table shows medians)
#   --quick           short benchmarks (-benchtime a tenth or less, 1 s CLI
#                     runs): to check the script, not to quote
#   --no-real         skip the real-S3 rows (no versitygw, no etcd)
#   --real-only       only the real-S3 rows (no go test benchmark)
#   --million         also the million-streams rows (BenchmarkManyStreams,
#                     10+ minutes per run and side)
#   --streams N       streams for --million (default 1000000)
#   --out DIR         where the benchmarks' output, raw.tsv, table.md and
#                     raw.md go (default: a new directory under $TMPDIR)
#
# Needs git, go, curl and jq; python3 is used when present to pick free
# ports.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD

before_rev=47efe13
after_rev=HEAD
count=3
quick=false
real=true
gorows=true
million=false
streams=1000000
out=

usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2; }
while [ $# -gt 0 ]; do
	case $1 in
	--before) before_rev=$2; shift 2 ;;
	--after) after_rev=$2; shift 2 ;;
	--count) count=$2; shift 2 ;;
	--quick) quick=true; shift ;;
	--no-real) real=false; shift ;;
	--real-only) gorows=false; shift ;;
	--million) million=true; shift ;;
	--streams) streams=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) usage; printf 'perftable.sh: unknown argument %q\n' "$1" >&2; exit 2 ;;
	esac
done
case $count in '' | *[!0-9]* | 0) echo "perftable.sh: --count wants a positive integer, got '$count'" >&2; exit 2 ;; esac
case $streams in '' | *[!0-9]* | 0) echo "perftable.sh: --streams wants a positive integer, got '$streams'" >&2; exit 2 ;; esac
for tool in git go curl jq; do
	command -v "$tool" >/dev/null || { echo "perftable.sh: $tool is needed" >&2; exit 2; }
done

log() { printf 'perftable.sh: %s\n' "$*" >&2; }

# versitygw's and etcd's start-up, shared with scripts/test.sh.
# shellcheck source=scripts/servers.sh
. "$root/scripts/servers.sh"

work=$(mktemp -d "${TMPDIR:-/tmp}/flightlog-perftable.XXXXXX")
if [ -z "$out" ]; then
	out=$(mktemp -d "${TMPDIR:-/tmp}/flightlog-perftable-out.XXXXXX")
fi
mkdir -p "$out"
log "the benchmarks' output and the tables go to $out"
pids=()
worktrees=()

cleanup() {
	rc=$?
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	for wt in "${worktrees[@]}"; do
		git -C "$root" worktree remove --force "$wt" 2>/dev/null || true
	done
	git -C "$root" worktree prune 2>/dev/null || true
	log "the benchmarks' output and the tables are in $out"
	if [ "$rc" -ne 0 ]; then
		for f in "$work"/*.log; do
			[ -s "$f" ] || continue
			log "---- $(basename "$f") (last 30 lines) ----"
			tail -n 30 "$f" >&2
		done
		log "FAILED (exit $rc)"
	fi
	rm -rf "$work"
	exit "$rc"
}
trap cleanup EXIT
# Interrupted, still stop the servers and remove the worktrees.
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- the machine -----------------------------------------------------------
loadavg() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || uptime; }
# busy: the 1-minute load average is above 1.5.
busy() { awk '{ exit !($1 > 1.5) }' /proc/loadavg 2>/dev/null; }
load_start=$(loadavg)
log "load average at start: $load_start ($(nproc) CPUs)"
if busy; then
	log "WARNING: the load average is above 1.5: these are not a quiet machine's figures"
fi

# ---- build before and after ------------------------------------------------
declare -A rev src bin cli
rev[before]=$(git rev-parse --verify "$before_rev^{commit}")
rev[after]=$(git rev-parse --verify "$after_rev^{commit}")
mkdir -p "$work/bin"
for side in before after; do
	s=$work/src-$side
	git worktree add --detach --quiet "$s" "${rev[$side]}"
	worktrees+=("$s")
	src[$side]=$s
	bin[$side]=$work/bin/$side-loglet.test
	cli[$side]=$work/bin/$side-flightlog
	log "building $side (${rev[$side]:0:12}): loglet test binary and flightlog"
	(cd "$s" && go test -c -o "${bin[$side]}" ./loglet && go build -o "${cli[$side]}" ./cmd/flightlog)
done

# ---- benchmark settings ----------------------------------------------------
if $quick; then
	bt_throughput=5000x
	bt_floor=200x
	bt_owncost=300x
	cli_duration=1s
else
	# The issue's: BenchmarkThroughput -benchtime 100000x,
	# 'BenchmarkAckFloor|BenchmarkOwnCost' -benchtime 3000x, bench's 5 s.
	bt_throughput=100000x
	bt_floor=3000x
	bt_owncost=3000x
	cli_duration=5s
fi

raw=$out/raw.tsv # side, run, key, value: every metric of every run
: >"$raw"

# parse_bench SIDE RUN FILE: go test's benchmark lines into raw.tsv, keyed
# "name|unit" (the name without its -GOMAXPROCS suffix).
parse_bench() {
	awk -v side="$1" -v run="$2" '
		/^Benchmark/ && NF >= 4 {
			name = $1
			sub(/-[0-9]+$/, "", name)
			for (i = 3; i + 1 <= NF; i += 2)
				printf "%s\t%s\t%s|%s\t%s\n", side, run, name, $(i + 1), $i
		}' "$3" >>"$raw"
}

# gobench SIDE RUN TAG PATTERN BENCHTIME [ARGS...]: one go test benchmark
# run of SIDE's binary; a failure is logged, and what it printed is kept.
gobench() {
	local side=$1 run=$2 tag=$3 pattern=$4 benchtime=$5
	shift 5
	local f=$out/$tag-$side-$run.txt
	log "run $run/$count, $side: $tag"
	if ! (cd "${src[$side]}/loglet" && "${bin[$side]}" -test.run '^$' -test.bench "$pattern" \
		-test.benchtime "$benchtime" -test.count 1 -test.timeout 90m "$@") >"$f" 2>&1; then
		log "WARNING: $tag failed for $side in run $run (its metrics print as —): see $f"
		grep -E '^(---|\s+\S+_test\.go)|FAIL|panic' "$f" | head -n 5 >&2 || true
	fi
	parse_bench "$side" "$run" "$f"
}

# clibench SIDE RUN TAG ARGS...: one `flightlog bench --json` run; its own
# cost, ack, MB/s and bare PUT (when reported) into raw.tsv as "TAG|…".
clibench() {
	local side=$1 run=$2 tag=$3
	shift 3
	local f=$out/$tag-$side-$run.json
	log "run $run/$count, $side: $tag"
	if ! "${cli[$side]}" bench --json --duration "$cli_duration" "$@" >"$f" 2>"$f.stderr"; then
		log "WARNING: $tag failed for $side in run $run (its metrics print as —): see $f.stderr"
		tail -n 5 "$f.stderr" >&2
		return 0
	fi
	jq -r --arg side "$side" --arg run "$run" --arg tag "$tag" '
		[["own-cost-p50-us", .stages.own_cost.p50_us],
		 ["own-cost-p99-us", .stages.own_cost.p99_us],
		 ["ack-p50-us", .ack.p50_us],
		 ["ack-p99-us", .ack.p99_us],
		 ["MB/s", .mb_per_s],
		 ["put-p50-us", .put.p50_us],
		 ["bare-put-p50-us", .put_baseline.raw_put_object.p50_us]]
		| .[] | select(.[1] != null)
		| [$side, $run, $tag + "|" + .[0], (.[1] | tostring)] | @tsv' "$f" >>"$raw" ||
		log "WARNING: $tag for $side in run $run: output is not the JSON expected: see $f"
}

# ---- the real servers --------------------------------------------------------
if $real; then
	start_versitygw "$work"
	start_etcd "$work"
	wait_versitygw
	wait_etcd
	log "versitygw on 127.0.0.1:$s3_port, etcd on 127.0.0.1:$etcd_port"
fi

# make_bucket NAME: a path-style CreateBucket, signed with SigV4 by curl.
make_bucket() {
	local code
	# The empty body's SHA-256, which S3 wants named (curl signs the header).
	code=$(curl -s -o "$work/bucket.out" -w '%{http_code}' -X PUT \
		-H 'x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855' \
		--aws-sigv4 "aws:amz:us-east-1:s3" --user "$S3_ACCESS_KEY:$S3_SECRET_KEY" \
		"http://127.0.0.1:$s3_port/$1") || code=000
	[ "$code" = 200 ] || { log "creating bucket $1: HTTP $code: $(cat "$work/bucket.out" 2>/dev/null)"; return 1; }
}

# realbench SIDE RUN: the real-S3 rows, each with its latency model in the
# same minutes; fresh buckets and a fresh etcd prefix for every run.
realbench() {
	local side=$1 run=$2
	local p=pt-$side-$run
	local b
	for b in std exa exb exc; do
		make_bucket "$p-$b" || {
			log "WARNING: the real-S3 rows of run $run are left out for $side (their metrics print as —)"
			return 0
		}
	done
	local common=(--s3-endpoint "http://127.0.0.1:$s3_port" --s3-region us-east-1
		--s3-access-key "$S3_ACCESS_KEY" --s3-secret-key "$S3_SECRET_KEY"
		--s3-bucket "$p-std" --etcd "http://127.0.0.1:$etcd_port")
	# Settlement off in the rows compared with the issue's table (47efe13
	# did not settle by default; since, bench settles at the library's
	# default), and one Standard row with settlement on at 1 s on both
	# sides: what a pass running beside the writers costs their p99.
	local off=(--settle-interval -1ns)
	clibench "$side" "$run" real-standard --model real --class standard "${common[@]}" "${off[@]}" \
		--etcd-prefix "/$p/standard/" --dir "$work/dir-$p-standard"
	clibench "$side" "$run" model-standard --model s3-standard "${off[@]}" --dir "$work/dir-$p-model-standard"
	clibench "$side" "$run" real-express --model real --class express "${common[@]}" "${off[@]}" \
		--s3-express-buckets "$p-exa,$p-exb,$p-exc" --etcd-prefix "/$p/express/" --dir "$work/dir-$p-express"
	clibench "$side" "$run" model-express --model s3-express "${off[@]}" --dir "$work/dir-$p-model-express"
	clibench "$side" "$run" real-standard-settle --model real --class standard "${common[@]}" --settle-interval 1s \
		--etcd-prefix "/$p/standard-settle/" --dir "$work/dir-$p-standard-settle"
}

# ---- the runs: each benchmark, before then after, N times --------------------
for run in $(seq 1 "$count"); do
	log "run $run/$count: load average $(loadavg)"
	if $gorows; then
		for side in before after; do
			gobench "$side" "$run" throughput '^BenchmarkThroughput$/^model=instant$' "$bt_throughput"
		done
		for side in before after; do
			gobench "$side" "$run" ackfloor '^BenchmarkAckFloor$' "$bt_floor"
		done
		for side in before after; do
			gobench "$side" "$run" owncost '^BenchmarkOwnCost$/^model=s3-express$' "$bt_owncost"
		done
	fi
	if $real; then
		for side in before after; do
			realbench "$side" "$run"
		done
	fi
	if $million; then
		for side in before after; do
			gobench "$side" "$run" manystreams '^BenchmarkManyStreams$' 1x -manystreams "$streams"
		done
	fi
done
load_end=$(loadavg)

# ---- the table ---------------------------------------------------------------
# get SIDE RUN KEY: the value, or nothing.
get() { awk -F'\t' -v s="$1" -v r="$2" -v k="$3" '$1 == s && $2 == r && $3 == k { print $4; exit }' "$raw"; }

# value SIDE RUN SPEC: SPEC is KEY (a metric) or KEY1 / KEY2 (their ratio
# within the run); nothing when a metric is missing.
value() {
	local side=$1 run=$2 spec=$3
	case $spec in
	*' / '*)
		local a b
		a=$(get "$side" "$run" "${spec%% / *}")
		b=$(get "$side" "$run" "${spec#* / }")
		[ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" 'BEGIN { if (b != 0) print a / b }' | number
		;;
	*) get "$side" "$run" "$spec" | number ;;
	esac
	return 0
}

# number: each number on stdin, printed whole from 1000 up and to four
# significant digits below.
number() {
	awk '{ x = $1 + 0; if (x >= 1000 || x <= -1000) printf "%.0f\n", x; else printf "%.4g\n", x }'
}

# median: of the numbers on stdin, one a line (the mean of the middle two
# for an even count); nothing for none.
median() {
	sort -g | awk '{ v[NR] = $1 } END {
		if (NR == 0) exit
		if (NR % 2) m = v[(NR + 1) / 2]; else m = (v[NR / 2] + v[NR / 2 + 1]) / 2
		print m }' | number
}

# met GOAL BEFORE AFTER: yes/no, or — when after is missing. GOAL is
# ">= X", "<= X", "keep-hi" (after at least 0.8x before) or "keep-lo"
# (after at most 1.25x before), "" for a row shown for context.
met() {
	local goal=$1 b=$2 a=$3
	[ -z "$goal" ] && return 0
	[ -z "$a" ] && { echo "—"; return 0; }
	case $goal in
	keep-*) [ -z "$b" ] && { echo "—"; return 0; } ;;
	esac
	awk -v g="$goal" -v b="$b" -v a="$a" 'BEGIN {
		split(g, p, " ")
		if (p[1] == ">=") ok = a >= p[2]
		else if (p[1] == "<=") ok = a <= p[2]
		else if (g == "keep-hi") ok = a >= 0.8 * b
		else if (g == "keep-lo") ok = a <= 1.25 * b
		print ok ? "yes" : "no" }'
}

goal_text() {
	case $1 in
	keep-hi) echo "keep (after ≥ 0.8× before)" ;;
	keep-lo) echo "keep (after ≤ 1.25× before)" ;;
	'') echo "" ;;
	*) sed -e 's/^>=/≥/' -e 's/^<=/≤/' <<<"$1" ;;
	esac
}

TP=BenchmarkThroughput/model=instant
S1N=$TP/class=standard/K=1/W=1/codec=none
S1S=$TP/class=standard/K=1/W=1/codec=s2
S3N=$TP/class=standard/K=3/W=2/codec=none
E3N=$TP/class=express/K=3/W=2/codec=none
E3S=$TP/class=express/K=3/W=2/codec=s2
AF=BenchmarkAckFloor/model=instant/class=express
OC=BenchmarkOwnCost/model=s3-express/K=3/W=2
MS=BenchmarkManyStreams/streams=$streams/active=$((streams / 100 > 0 ? streams / 100 : 1))/every=1s

# The rows: label, spec (see value), goal (see met).
rows=()
$gorows && rows+=(
	"instant store, Standard K=1, codec none: MB/s|$S1N|MB/s|"
	"· the design's two-pass floor, same run: MB/s|$S1N|two-pass-MB/s|"
	"· K=1 over the floor (x-two-pass)|$S1N|x-two-pass|>= 0.8"
	"· the floor's CPU over ours (x-two-pass-cpu)|$S1N|x-two-pass-cpu|>= 0.8"
	"instant store, Standard K=3/W=2, codec none: MB/s|$S3N|MB/s|"
	"· K=3 over K=1, MB/s|$S3N|MB/s / $S1N|MB/s|>= 0.9"
	"· K=3 over K=1, by CPU per batch (K=1's over K=3's)|$S1N|cpu-us/batch / $S3N|cpu-us/batch|>= 0.9"
	"instant store, Express K=3/W=2, codec none: MB/s|$E3N|MB/s|"
	"· Express over Standard K=3, MB/s|$E3N|MB/s / $S3N|MB/s|>= 0.9"
	"· Express backlog stalled, ms/s|$E3N|backlog-stalled-ms/s|<= 0"
	"· Express pool blocked, ms/s|$E3N|pool-blocked-ms/s|"
	"· with the backlog of 64 MiB (the default before), stalled ms/s|$E3N/backlog=64MiB|backlog-stalled-ms/s|"
	"· with the backlog of 64 MiB: MB/s|$E3N/backlog=64MiB|MB/s|"
	"Standard K=1, S2 over raw S2 (x-s2)|$S1S|x-s2|keep-hi"
	"Express K=3/W=2, S2 over raw S2 (x-s2)|$E3S|x-s2|keep-hi"
	"own cost, one producer, instant, Express K=1: p50 µs|$AF/K=1/codec=none|ack-over-p50-us|keep-lo"
	"· p99 µs|$AF/K=1/codec=none|ack-over-p99-us|keep-lo"
	"own cost, one producer, instant, Express K=3: p50 µs|$AF/K=3/codec=none|ack-over-p50-us|keep-lo"
	"· p99 µs|$AF/K=3/codec=none|ack-over-p99-us|keep-lo"
	"own cost, Express model, codec none, 8 producers: p50 µs|$OC/codec=none/producers=8|own-cost-p50-us|<= 150"
	"· p99 µs|$OC/codec=none/producers=8|own-cost-p99-us|<= 1000"
	"own cost, Express model, codec none, 64 producers: p50 µs|$OC/codec=none/producers=64|own-cost-p50-us|<= 150"
	"· p99 µs|$OC/codec=none/producers=64|own-cost-p99-us|<= 1000"
	"own cost, Express model, S2, 8 producers: p50 µs|$OC/codec=s2/producers=8|own-cost-p50-us|<= 150"
	"· p99 µs|$OC/codec=s2/producers=8|own-cost-p99-us|<= 1000"
	"own cost, Express model, S2, 64 producers: p50 µs|$OC/codec=s2/producers=64|own-cost-p50-us|<= 150"
	"· p99 µs|$OC/codec=s2/producers=64|own-cost-p99-us|<= 1000"
)
if $real; then
	rows+=(
		"real S3 (versitygw), Standard: own cost p50 µs|real-standard|own-cost-p50-us|"
		"· the s3-standard model, same minutes: p50 µs|model-standard|own-cost-p50-us|"
		"· real over model, p50|real-standard|own-cost-p50-us / model-standard|own-cost-p50-us|<= 2"
		"· real: own cost p99 µs|real-standard|own-cost-p99-us|"
		"· model: own cost p99 µs|model-standard|own-cost-p99-us|"
		"· real over model, p99|real-standard|own-cost-p99-us / model-standard|own-cost-p99-us|<= 2"
		"real S3 (versitygw), Express: own cost p50 µs|real-express|own-cost-p50-us|"
		"· the s3-express model, same minutes: p50 µs|model-express|own-cost-p50-us|"
		"· real over model, p50|real-express|own-cost-p50-us / model-express|own-cost-p50-us|<= 2"
		"· real: own cost p99 µs|real-express|own-cost-p99-us|"
		"· model: own cost p99 µs|model-express|own-cost-p99-us|"
		"· real over model, p99|real-express|own-cost-p99-us / model-express|own-cost-p99-us|<= 2"
		"· Express, a bare PutObject of the median flight after the load: p50 µs|real-express|bare-put-p50-us|"
		"real S3 Standard, settlement on at 1 s: own cost p50 µs|real-standard-settle|own-cost-p50-us|"
		"· p99 µs|real-standard-settle|own-cost-p99-us|"
		"· p99 over settlement off's|real-standard-settle|own-cost-p99-us / real-standard|own-cost-p99-us|"
		"· ack p99 µs|real-standard-settle|ack-p99-us|"
		"· settlement off: ack p99 µs|real-standard|ack-p99-us|"
	)
fi
if $million; then
	rows+=(
		"$streams streams: successor Open, the leader live, ms|$MS|takeover-open-ms|<= 2000"
		"· Open after a clean close, ms|$MS|open-after-close-ms|<= 2000"
		"· absorb round p99, ms|$MS|round-p99-ms|<= 100"
		"· absorb round p50, ms|$MS|round-p50-ms|"
	)
fi

# A row is "label|spec|goal" where spec holds one "|" (KEY = name|unit) or
# three (KEY1 / KEY2); the goal is the last field, the label the first.
table=$out/table.md
rawmd=$out/raw.md
{
	echo "| row | before (${rev[before]:0:7}) | after (${rev[after]:0:7}) | goal | met? |"
	echo "|---|---|---|---|---|"
} >"$table"
{
	printf '| row |'
	for side in before after; do
		for run in $(seq 1 "$count"); do printf ' %s %s |' "$side" "$run"; done
	done
	printf '\n|---|'
	for _ in $(seq 1 $((2 * count))); do printf -- '---|'; done
	printf '\n'
} >"$rawmd"
for row in "${rows[@]}"; do
	label=${row%%|*}
	goal=${row##*|}
	spec=${row#*|}
	spec=${spec%|*}
	declare -A med=()
	rawline="| $label |"
	for side in before after; do
		vals=()
		for run in $(seq 1 "$count"); do
			v=$(value "$side" "$run" "$spec")
			vals+=("$v")
			rawline+=" ${v:-—} |"
		done
		med[$side]=$(printf '%s\n' "${vals[@]}" | grep -v '^$' | median || true)
	done
	printf '| %s | %s | %s | %s | %s |\n' "$label" "${med[before]:-—}" "${med[after]:-—}" \
		"$(goal_text "$goal")" "$(met "$goal" "${med[before]}" "${med[after]}")" >>"$table"
	echo "$rawline" >>"$rawmd"
	unset med
done

echo
echo "Before ${rev[before]:0:12}, after ${rev[after]:0:12}; medians of $count run(s) each, interleaved; $(nproc) CPUs."
echo "Load average at start: $load_start; at end: $load_end."
$quick && echo "QUICK run (--quick: short benchmarks): for checking the script, not for quoting."
echo
cat "$table"
echo
echo "Every run's value:"
echo
cat "$rawmd"
echo
echo "Commands (each run, each side's binary; benchtime as above):"
echo "  loglet.test -test.run '^\$' -test.bench '^BenchmarkThroughput\$/^model=instant\$' -test.benchtime $bt_throughput"
echo "  loglet.test -test.run '^\$' -test.bench '^BenchmarkAckFloor\$' -test.benchtime $bt_floor"
echo "  loglet.test -test.run '^\$' -test.bench '^BenchmarkOwnCost\$/^model=s3-express\$' -test.benchtime $bt_owncost"
$real && echo "  flightlog bench --json --duration $cli_duration --settle-interval -1ns --model real --class standard|express (versitygw + etcd), and --model s3-standard|s3-express; and --model real --class standard --settle-interval 1s"
$million && echo "  loglet.test -test.run '^\$' -test.bench '^BenchmarkManyStreams\$' -test.benchtime 1x -manystreams $streams"
if busy || awk -v l="$load_start" 'BEGIN { split(l, p, " "); exit !(p[1] > 1.5) }'; then
	echo
	echo "WARNING: the load average was above 1.5 (start $load_start, end $load_end): these are not a quiet machine's figures."
fi
