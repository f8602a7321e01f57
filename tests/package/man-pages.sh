#!/usr/bin/env bash
# tests/package/man-pages.sh [--root DIR] TOOL... - the installed manual
# pages and completions of the tools, as an administrator meets them:
#   - `man -w TOOL` finds DIR/usr/share/man/man1/TOOL.1.gz (DIR: / by
#     default, else an unpacked package);
#   - `man --warnings` renders it without a message from groff, at 80
#     columns and at lintian's 120, in lintian's environment;
#   - every flag that the installed program's --help shows, and each of
#     its commands' --help, is an entry of the page's option lists (not
#     only a word of the synopsis);
#   - bash-completion's file defines the completion of TOOL (complete -p),
#     zsh's starts with "#compdef TOOL", fish's completes TOOL; not with
#     --no-completions (knemrs-tune, an MPI program with a hand-written
#     page and no completions).
# One line per tool; exit 1 if any check failed.
set -euo pipefail

root=
completions=1
while [ $# -gt 0 ]; do
	case $1 in
	--root) root=${2%/}; shift 2 ;;
	--no-completions) completions=0; shift ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || { echo "usage: man-pages.sh [--root DIR] [--no-completions] TOOL..." >&2; exit 2; }
mandir=$root/usr/share/man
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# man in lintian's environment; MANWIDTH first.
lman() {
	local width=$1
	shift
	env -i PATH="$PATH" LC_ALL=C.UTF-8 MANROFFSEQ= MANWIDTH="$width" man "$@"
}

# flags FILE: the leading -x / --long words of each line that starts
# (after indentation) with "-", one per line.
flags() {
	awk '{
		sub(/^[ \t]+/, "")
		if (substr($0, 1, 1) != "-") next
		for (i = 1; i <= NF; i++) {
			w = $i; sub(/,$/, "", w); sub(/=.*/, "", w)
			if (substr(w, 1, 1) != "-" || w == "-") break
			print w
		}
	}' "$1"
}

# commands HELP: the commands listed under "Commands:" in a clap --help.
commands() {
	awk '/^Commands:/ { on = 1; next } on && /^[^ ]/ { on = 0 } on && NF { print $1 }' "$1" |
		grep -vx help || true
}

status=0
for t in "$@"; do
	bin=$root/usr/bin/$t
	why=
	page=$(lman 80 -M "$mandir" -w "$t" 2>/dev/null || true)
	if [ "$page" != "$mandir/man1/$t.1.gz" ]; then
		why="man -w $t finds '$page', not $mandir/man1/$t.1.gz"
	else
		for w in 80 120; do
			lman "$w" --warnings -E UTF-8 -l -Tutf8 -Z "$page" 2> "$work/err" > /dev/null ||
				why="man -l $page failed at $w columns"
			[ ! -s "$work/err" ] && [ -z "$why" ] ||
				{ why="man --warnings at $w columns: $(head -n 3 "$work/err" | tr '\n' ' ')"; break; }
		done
	fi
	n=0
	if [ -z "$why" ]; then
		lman 200 --nh --nj -l "$page" > "$work/page" 2> /dev/null
		flags "$work/page" | sort -u > "$work/documented"
		"$bin" --help > "$work/help"
		helps=("$work/help")
		for c in $(commands "$work/help"); do
			"$bin" "$c" --help > "$work/help-$c"
			helps+=("$work/help-$c")
		done
		for h in "${helps[@]}"; do
			c=$t
			[ "$h" = "$work/help" ] || c="$t ${h##*/help-}"
			grep -q -- '--help' "$h" || { why="no --help in $c --help: cannot read the flags"; break; }
			for f in $(flags "$h"); do
				n=$((n + 1))
				grep -qxF -- "$f" "$work/documented" ||
					{ why="$f of $c --help is not documented in man $t"; break 2; }
			done
		done
	fi
	if [ -z "$why" ] && [ "$completions" = 1 ]; then
		comp=$root/usr/share/bash-completion/completions/$t
		bash -c ". '$comp' && complete -p '$t'" > /dev/null 2>&1 ||
			why="$comp does not complete $t"
		head -n 1 "$root/usr/share/zsh/vendor-completions/_$t" | grep -qx "#compdef $t" ||
			why="$root/usr/share/zsh/vendor-completions/_$t is not zsh's completion of $t"
		grep -q "^complete -c $t " "$root/usr/share/fish/vendor_completions.d/$t.fish" ||
			why="$root/usr/share/fish/vendor_completions.d/$t.fish does not complete $t"
	fi
	if [ -n "$why" ]; then
		echo "man-pages: $t: FAIL: $why"
		status=1
	else
		echo "man-pages: $t: man finds and renders its page without warnings;" \
			"the $n flags of its ${#helps[@]} --help texts are documented$([ "$completions" = 0 ] || echo '; bash, zsh and fish complete it')"
	fi
done
exit $status
