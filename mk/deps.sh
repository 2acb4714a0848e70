#!/bin/sh
# Installs the Debian packages mesh needs to build, test and benchmark.
# As root it runs apt-get itself; otherwise it prints the one command to run.
# Usage: mk/deps.sh [build|demo|test|bench|all]
set -e
BUILD="gcc make pkg-config libevent-dev libjansson-dev zlib1g-dev libpng-dev libpq-dev"
TEST="clang libclang-rt-14-dev postgresql curl parallel zsh fish groff-base bsdextrautils prometheus python3 python3-numpy python3-setuptools python3-pip python3-venv nodejs nginx chromium"
# The gateway tests drive the official OpenAI client (npm) and nginx; mesh
# ui's browser test Debian's chromium (through playwright-core, npm).  A
# nodejs that bundles npm (NodeSource's) conflicts with Debian's npm package:
# ask for npm only where no npm command exists.
command -v npm >/dev/null 2>&1 || TEST="$TEST npm"
BENCH="parallel beanstalkd findutils wrk haproxy nginx python3 curl"
case "${1:-all}" in
build) PKGS="$BUILD" ;;
demo) PKGS="$BUILD curl" ;; # the meshd demo reads /metrics with curl
test) PKGS="$BUILD $TEST" ;;
bench) PKGS="$BUILD $BENCH" ;;
*) PKGS="$BUILD $TEST $BENCH" ;;
esac
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
update="apt-get update"
install="apt-get install -y$missing"
if [ "$(id -u)" != 0 ]; then
	# The exact line for who runs it: sudo where there is one, else su
	# (a Debian set up with a root password has no sudo).
	if command -v sudo >/dev/null 2>&1; then
		line="sudo $update && sudo $install"
	else
		line="su -c '$update && $install'"
	fi
	echo "mesh: missing packages:$missing" >&2
	echo "mesh: run: $line" >&2
	exit 1
fi
echo "mesh: installing:$missing" >&2
export DEBIAN_FRONTEND=noninteractive
# Servers the tests and benches start themselves (PostgreSQL, nginx,
# beanstalkd, haproxy, prometheus), each on its own port and directory:
# their packages must not start a system service now (policy-rc.d, Debian's
# way to say so) nor at the next boot (disabled below).
enabled() { systemctl list-unit-files --type=service --state=enabled --no-legend 2>/dev/null | awk '{print $1}'; }
enabled_before=""
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
	enabled_before=$(mktemp)
	enabled >"$enabled_before"
fi
norc=""
if [ ! -e /usr/sbin/policy-rc.d ]; then
	printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && norc=1
fi
rc=0
apt-get install -y -q $missing >/dev/null 2>&1 || {
	apt-get update -q >/dev/null 2>&1
	apt-get install -y -q $missing >/dev/null
} || rc=$?
[ -n "$norc" ] && rm -f /usr/sbin/policy-rc.d
[ "$rc" = 0 ] || exit "$rc"
# The services the install enabled (a package's dependencies' too).
if [ -n "$enabled_before" ]; then
	enabled | grep -v -x -F -f "$enabled_before" | while read -r unit; do
		systemctl disable --now "$unit" >/dev/null 2>&1 || :
	done
	rm -f "$enabled_before"
fi
exit 0
