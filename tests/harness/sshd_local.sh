#!/usr/bin/env bash
# A real OpenSSH server on loopback for crashcart's SSH tests (Debian's openssh-server).
#
#   sshd_local.sh up DIR PORT     generate a host key and client keys in DIR, start sshd on
#                                 127.0.0.1:PORT (key login only) and wait until it answers
#   sshd_local.sh down DIR        stop the sshd started from DIR (by its recorded PID)
#
# DIR then holds: known_hosts (the host key, as "[127.0.0.1]:PORT ..."), client_ed25519
# (an unencrypted client key), client_enc_ed25519 (the same kind of key encrypted with the
# passphrase in DIR/passphrase) and other_host_ed25519.pub (a key that is NOT the host's,
# for the host-key mismatch test). Both client keys are authorized for the current user.
# Nothing outside DIR is written except /run/sshd, sshd's privilege-separation directory.
set -euo pipefail

log() { printf '[sshd_local %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "FATAL: $*"; exit 1; }
SSHD=/usr/sbin/sshd

proc_running() {
  local st; st=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [ -n "$st" ] && [ "$st" != Z ]
}
our_sshd() { # DIR -> true when DIR/sshd.pid names a live sshd
  local f="$1/sshd.pid" pid
  [ -s "$f" ] || return 1
  pid=$(cat "$f")
  proc_running "$pid" && [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$(readlink -f "$SSHD")" ] || return 1
  # The config's path, not only the exe: a pid of a dead sshd of ours may since be another's sshd.
  # sshd retitles itself ("sshd: /usr/sbin/sshd -D -e -f DIR/sshd_config [listener] ..."), so
  # its command line is one string: the path is looked for as a word in it.
  local argv; argv=$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null) || return 1
  [[ " $argv " == *" $1/sshd_config "* ]]
}

cmd_up() {
  local dir=$1 port=$2 i
  [ -x "$SSHD" ] || die "$SSHD not found: install openssh-server (tests/harness/slurm_local.sh install does)"
  command -v ssh-keygen >/dev/null || die "ssh-keygen not found: install openssh-client"
  mkdir -p "$dir"; chmod 700 "$dir"
  if our_sshd "$dir"; then log "sshd already running (pid $(cat "$dir/sshd.pid"))"; return 0; fi
  [ -s "$dir/host_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C crashcart-test-host -f "$dir/host_ed25519"
  [ -s "$dir/other_host_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C not-the-host -f "$dir/other_host_ed25519"
  [ -s "$dir/client_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C crashcart-test -f "$dir/client_ed25519"
  if [ ! -s "$dir/client_enc_ed25519" ]; then
    head -c 24 /dev/urandom | base64 | tr -d '/+=' > "$dir/passphrase"; chmod 600 "$dir/passphrase"
    ssh-keygen -q -t ed25519 -N "$(cat "$dir/passphrase")" -C crashcart-test-enc -f "$dir/client_enc_ed25519"
  fi
  cat "$dir/client_ed25519.pub" "$dir/client_enc_ed25519.pub" > "$dir/authorized_keys"
  chmod 600 "$dir/authorized_keys"
  echo "[127.0.0.1]:$port $(cut -d' ' -f1,2 "$dir/host_ed25519.pub")" > "$dir/known_hosts"
  echo "[127.0.0.1]:$port $(cut -d' ' -f1,2 "$dir/other_host_ed25519.pub")" > "$dir/wrong_known_hosts"
  cat > "$dir/sshd_config" <<EOF
Port $port
ListenAddress 127.0.0.1
HostKey $dir/host_ed25519
PidFile $dir/sshd.pid.sshd
AuthorizedKeysFile $dir/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
MaxStartups 100
MaxSessions 100
LogLevel VERBOSE
EOF
  # sshd refuses to start without its privilege-separation directory.
  mkdir -p /run/sshd; chmod 755 /run/sshd
  setsid "$SSHD" -D -e -f "$dir/sshd_config" </dev/null >>"$dir/sshd.log" 2>&1 &
  echo $! > "$dir/sshd.pid"
  for i in $(seq 1 50); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then log "sshd up on 127.0.0.1:$port (pid $(cat "$dir/sshd.pid"))"; return 0; fi
    # Running, not our_sshd: until setsid has exec()ed, the pid's exe is still setsid's.
    proc_running "$(cat "$dir/sshd.pid")" || { tail -n 20 "$dir/sshd.log" >&2; die "sshd exited during startup (log: $dir/sshd.log)"; }
    sleep 0.1
  done
  die "sshd did not answer on 127.0.0.1:$port (log: $dir/sshd.log)"
}

cmd_down() {
  local dir=$1 pid i
  [ -s "$dir/sshd.pid" ] || return 0
  pid=$(cat "$dir/sshd.pid")
  if our_sshd "$dir"; then
    kill -TERM "$pid"
    for i in $(seq 1 50); do proc_running "$pid" || break; sleep 0.1; done
    proc_running "$pid" && kill -KILL "$pid"
    log "stopped sshd (pid $pid)"
  fi
  rm -f "$dir/sshd.pid"
}

case "${1:-}" in
  up)   [ $# -eq 3 ] || die "usage: $0 up DIR PORT"; cmd_up "$2" "$3" ;;
  down) [ $# -eq 2 ] || die "usage: $0 down DIR"; cmd_down "$2" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 2 ;;
esac
