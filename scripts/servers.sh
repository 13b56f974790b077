# shellcheck shell=bash
# Starting versitygw and etcd on free loopback ports, shared by
# scripts/test.sh and scripts/perftable.sh. Sourced, not run. The caller
# defines log (one line to stderr), holds an array pids that the started
# servers' process ids are appended to (it kills them on exit), and
# passes a scratch directory for the servers' data and logs.
#
#   - versitygw (S3-compatible, posix backend), built with `go install` and
#     cached under $HOME/.cache/flightlog/tools (the cache is never required);
#   - etcd (from PATH, else the distribution's etcd-server package).

VERSITYGW_VERSION=v1.8.0
TOOLS_ROOT=$HOME/.cache/flightlog/tools
TOOLS=${FLIGHTLOG_TOOLS:-$TOOLS_ROOT/versitygw-$VERSITYGW_VERSION}

# The credentials versitygw is started with (a local test server's).
S3_ACCESS_KEY=flightlog
S3_SECRET_KEY=flightlog-secret

# A free loopback port: bind port 0, read what the kernel chose. (Another
# process could take it before the server binds; the readiness wait
# then fails clearly.)
free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()' 2>/dev/null ||
		echo $((20000 + RANDOM % 20000))
}

# wait_for NAME SECONDS CMD...: poll CMD until it succeeds.
wait_for() {
	local name=$1 secs=$2
	shift 2
	local deadline=$((SECONDS + secs))
	until "$@" >/dev/null 2>&1; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			log "$name did not answer within ${secs}s"
			return 1
		fi
		sleep 0.1
	done
}

# start_versitygw WORK: builds versitygw into the cache if it is not there,
# starts it over WORK/s3 (logging to WORK/versitygw.log) and sets s3_port
# and versitygw_pid. It does not wait; wait_versitygw does.
start_versitygw() {
	local work=$1
	local vgw=$TOOLS/versitygw
	if [ ! -x "$vgw" ]; then
		log "building versitygw $VERSITYGW_VERSION into $TOOLS (first run only)"
		mkdir -p "$TOOLS"
		# Outside the module, so this project's go.mod is not consulted.
		(cd "$work" && GOFLAGS= GOBIN="$TOOLS" go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION")
	fi
	s3_port=$(free_port)
	mkdir -p "$work/s3"
	ROOT_ACCESS_KEY=$S3_ACCESS_KEY ROOT_SECRET_KEY=$S3_SECRET_KEY \
		"$vgw" --port "127.0.0.1:$s3_port" --quiet --keep-alive posix "$work/s3" >"$work/versitygw.log" 2>&1 &
	versitygw_pid=$!
	pids+=("$versitygw_pid")
}

# start_etcd WORK: finds etcd (installing the distribution's etcd-server
# when there is none), starts it with its data in WORK/etcd (logging to
# WORK/etcd.log) and sets etcd_port and etcd_pid. It does not wait.
start_etcd() {
	local work=$1
	local etcd_bin
	etcd_bin=$(command -v etcd || true)
	if [ -z "$etcd_bin" ] && [ -x /usr/bin/etcd ]; then
		etcd_bin=/usr/bin/etcd
	fi
	if [ -z "$etcd_bin" ]; then
		log "installing etcd-server"
		local sudo=
		if [ "$(id -u)" -ne 0 ]; then sudo=sudo; fi
		$sudo apt-get update -qq
		DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq etcd-server >"$work/apt.log" 2>&1 ||
			{ cat "$work/apt.log" >&2; return 1; }
		# The package may start a system etcd on the default ports; ours uses others.
		etcd_bin=$(command -v etcd || echo /usr/bin/etcd)
	fi
	etcd_port=$(free_port)
	local etcd_peer
	etcd_peer=$(free_port)
	"$etcd_bin" --name flightlog-test --data-dir "$work/etcd" \
		--listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
		--listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
		--initial-cluster "flightlog-test=http://127.0.0.1:$etcd_peer" \
		--logger=zap --log-level=warn >"$work/etcd.log" 2>&1 &
	etcd_pid=$!
	pids+=("$etcd_pid")
}

s3_up() { # versitygw answers an anonymous GET / (403 once it is up)
	local code
	code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$s3_port/") && [ "$code" != 000 ]
}
etcd_up() { curl -sf "http://127.0.0.1:$etcd_port/health" | grep -q '"health":"true"'; }
alive() { kill -0 "$1" 2>/dev/null; }

# wait_versitygw and wait_etcd: until the server answers, or fail saying
# whether it exited.
wait_versitygw() {
	wait_for "versitygw on 127.0.0.1:$s3_port" 20 s3_up || {
		alive "$versitygw_pid" || log "versitygw exited"
		return 1
	}
}
wait_etcd() {
	wait_for "etcd on 127.0.0.1:$etcd_port" 30 etcd_up || {
		alive "$etcd_pid" || log "etcd exited"
		return 1
	}
}
