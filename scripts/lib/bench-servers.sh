# bench-servers.sh — sourced by scripts/bench-http, scripts/bench-dashboard and scripts/bench-tsbs: starts
# the systems they compare on free loopback ports, each with its own directories under
# $WORK. The caller sets WORK (a scratch directory, with the tsdht binary at
# $WORK/tsdht) and an array PIDS, to which every process started here is added so that
# the caller's exit trap can stop them.

# port prints a free TCP port on 127.0.0.1.
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

# wait_url URL waits (up to 30 s) until URL answers 2xx.
wait_url() { for _ in $(seq 300); do curl -fs -o /dev/null "$1" && return 0; sleep 0.1; done; echo "no answer from $1" >&2; exit 1; }

# cpu PID… prints the CPU seconds (user + system) the processes have used so far.
cpu() { local t=0; for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo "$t $(getconf CLK_TCK)" | awk '{printf "%.2f", $1 / $2}'; }

# tsdht_start N RF LABEL [NODE-FLAG…]: N `tsdht node`s at rf RF (data and logs under
# $WORK/LABEL-i), HTTP on the first, each given the NODE-FLAGs; returns once every node
# is a live member. Sets TSDHT_HTTP and TSDHT_RPC (the first node's HTTP and RPC
# addresses) and TSDHT_PIDS.
tsdht_start() {
	local n=$1 rf=$2 label=$3 seed=''
	shift 3
	TSDHT_HTTP='' TSDHT_RPC='' TSDHT_PIDS=()
	for i in $(seq 0 $((n - 1))); do
		local rpc=$(port) gossip=$(port) args=()
		[[ $i -gt 0 ]] && args+=(--join "$seed")
		if [[ $i -eq 0 ]]; then seed=127.0.0.1:$gossip TSDHT_HTTP=127.0.0.1:$(port) TSDHT_RPC=127.0.0.1:$rpc; args+=(--http "$TSDHT_HTTP"); fi
		TSDHT_HTTP_PPROF=1 "$WORK/tsdht" node --rpc 127.0.0.1:$rpc --gossip 127.0.0.1:$gossip --data "$WORK/$label-$i" --rf "$rf" \
			"$@" "${args[@]}" 2>"$WORK/$label-$i.log" &
		TSDHT_PIDS+=($!) PIDS+=($!)
	done
	wait_url "http://$TSDHT_HTTP/ready"
	for _ in $(seq 300); do
		[[ $(curl -fs "http://$TSDHT_HTTP/metrics" | awk '/^tsdht_cluster_live_members/ {print $2}') == "$n" ]] && return 0
		sleep 0.1
	done
	echo "$label: not every one of the $n nodes is a live member after 30 s; see $WORK/$label-*.log" >&2
}

# influxd_start LABEL: InfluxDB 1.x (Debian's influxd; installed if missing) with its own
# config and directories under $WORK/LABEL, no row limit on an answer. Sets INFLUX_HTTP
# and INFLUX_PID.
influxd_start() {
	local label=$1
	command -v influxd >/dev/null || apt-get install -y influxdb >&2
	INFLUX_HTTP=127.0.0.1:$(port)
	cat >"$WORK/$label.conf" <<CONF
reporting-disabled = true
bind-address = "127.0.0.1:$(port)"
[meta]
  dir = "$WORK/$label/meta"
[data]
  dir = "$WORK/$label/data"
  wal-dir = "$WORK/$label/wal"
  query-log-enabled = false
[http]
  bind-address = "$INFLUX_HTTP"
  log-enabled = false
  max-row-limit = 0
[monitor]
  store-enabled = false
CONF
	influxd -config "$WORK/$label.conf" 2>"$WORK/$label.log" &
	INFLUX_PID=$!
	PIDS+=($INFLUX_PID)
	wait_url "http://$INFLUX_HTTP/ping"
}

# settle waits, after a load and before the queries, until the machine is idle again
# (below SETTLE_BUSY % of its CPUs busy over a second, twice in a row) or SETTLE_MAX
# seconds passed: a system still compacting what it was sent (tsdht's sealer, InfluxDB's
# TSM snapshots, VictoriaMetrics' merges) would otherwise answer its queries beside that
# work. Every system waits alike; the wait is printed.
SETTLE_BUSY=${SETTLE_BUSY:-10} SETTLE_MAX=${SETTLE_MAX:-60}
settle() {
	local t0=$SECONDS quiet=0 a b
	while ((SECONDS - t0 < SETTLE_MAX && quiet < 2)); do
		a=($(head -1 /proc/stat)); sleep 1; b=($(head -1 /proc/stat))
		local busy=$(( (b[1]+b[2]+b[3]+b[6]+b[7]) - (a[1]+a[2]+a[3]+a[6]+a[7]) ))
		local all=$(( busy + (b[4]+b[5]) - (a[4]+a[5]) ))
		if ((all > 0 && busy * 100 < SETTLE_BUSY * all)); then quiet=$((quiet + 1)); else quiet=0; fi
	done
	echo "${0##*/}: idle after $((SECONDS - t0)) s (quiet: $quiet)" >&2
}
