#!/usr/bin/env bash
# session.sh: one tmux session per sandbox process, each with its own cproxy
# token, revoked when the sandbox sleeps and replaced when it wakes. See
# docs/integrations/tmux.md.
#
#   session.sh start NAME SANDBOX [CMD ARGS...]  mint a token, start session NAME running CMD
#   session.sh sleep NAME SANDBOX                revoke SANDBOX's tokens, end session NAME
#   session.sh wake  NAME SANDBOX [CMD ARGS...]  mint a new token; restart CMD in NAME with it
#                                                (a new session, or the pane respawned if NAME
#                                                is still running, its old token revoked first)
#
# Where cproxy is comes from cproxy's own variables: CPROXY_CONFIG (the
# config file), or CPROXY_ADMIN_URL and CPROXY_URL (the proxy as the
# sandbox reaches it). CPROXY_ENV_FLAGS adds flags to cproxy env, such as
# "--claude-auth oauth --claude-config-dir /data/claude"; CPROXY_TMUX_FLAGS
# adds flags to every tmux call, such as "-L NAME" or "-S SOCKET". Both are
# split on spaces. Needs tmux 3.2 or later (new-session -e).
set -euo pipefail

# The variables that hold real credentials on the harness's side
# (docs/cli.md#cproxy-env). A tmux server started here would pass its
# environment on to every pane, so tmux never sees them.
credential_vars=(ANTHROPIC_API_KEY ANTHROPIC_AUTH_TOKEN CLAUDE_CODE_OAUTH_TOKEN GITHUB_TOKEN GH_TOKEN NPM_TOKEN NODE_AUTH_TOKEN)

usage() {
	echo "usage: session.sh start|sleep|wake NAME SANDBOX [CMD ARGS...]" >&2
	exit 2
}

tmux_() {
	local unset=()
	for v in "${credential_vars[@]}"; do unset+=(-u "$v"); done
	# shellcheck disable=SC2086 # CPROXY_TMUX_FLAGS is split on purpose
	env "${unset[@]}" tmux ${CPROXY_TMUX_FLAGS:-} "$@"
}

# mint SANDBOX: fill env_flags with one -e NAME=value per variable of the
# environment cproxy env prints for a new token of SANDBOX. The token stays
# in this shell's memory and tmux's arguments, never in a file.
mint() {
	local lines line
	# shellcheck disable=SC2086 # CPROXY_ENV_FLAGS is split on purpose
	lines=$(cproxy env --sandbox "$1" --format env ${CPROXY_ENV_FLAGS:-})
	env_flags=()
	while IFS= read -r line; do
		[ -n "$line" ] && env_flags+=(-e "$line")
	done <<<"$lines"
	if [ ${#env_flags[@]} -eq 0 ]; then
		echo "session.sh: cproxy env printed no environment" >&2
		exit 1
	fi
}

[ $# -ge 3 ] || usage
op=$1 name=$2 sandbox=$3
shift 3

case $op in
start)
	mint "$sandbox"
	tmux_ new-session -d -s "$name" "${env_flags[@]}" "$@"
	;;
sleep)
	# Revoke first: once cproxy has answered, the token is refused even if
	# the process is still running (a VM that has not stopped yet).
	cproxy token revoke --sandbox "$sandbox"
	if tmux_ has-session -t "=$name" 2>/dev/null; then
		tmux_ kill-session -t "=$name"
	fi
	;;
wake)
	if tmux_ has-session -t "=$name" 2>/dev/null; then
		# Still running: a process cannot take a new environment, so it is
		# restarted with one. The old token goes first.
		cproxy token revoke --sandbox "$sandbox"
		mint "$sandbox"
		# The session's own environment too, for panes opened later.
		for ((i = 1; i < ${#env_flags[@]}; i += 2)); do
			tmux_ set-environment -t "=$name" "${env_flags[i]%%=*}" "${env_flags[i]#*=}"
		done
		tmux_ respawn-pane -k -t "=$name:" "${env_flags[@]}" "$@"
	else
		mint "$sandbox"
		tmux_ new-session -d -s "$name" "${env_flags[@]}" "$@"
	fi
	;;
*)
	usage
	;;
esac
