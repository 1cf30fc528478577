# Shared by direct.sh, slurm.sh and container.sh (sourced, never run): errors, quoting, the Slurm nodelist.
# shellcheck shell=bash

# One line on stderr. Exit 2 is bad usage (a flag, a value, an inconsistent environment), as in primus_hydra.
die() {
    echo "error: $1" >&2
    exit "${2:-2}"
}

# `option VALUE` parsing: the value must be there (an empty string is allowed, a missing one is not).
require_value() {  # <option> <number of remaining args including the option>
    (($2 >= 2)) || die "$1 needs a value (see --help)"
}

# The words as one line a shell reads back into the same words (spaces, quotes, $(), newlines included).
shell_quote() {
    local out="" word quoted
    for word in "$@"; do
        printf -v quoted '%q' "$word"
        out+="${out:+ }$quoted"
    done
    printf '%s\n' "$out"
}

# The repository this script belongs to: launchers/ sits at its root.
repo_root() {
    (cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
}

# Slurm hostlist expression -> one host per line, in order, without scontrol: `n[1-3,5]`, `gpu-a[01-02],gpu-b7`,
# `rack[1-2]-n[01-02]` (several bracket groups), zero padding kept as written (`[08-10]` -> 08 09 10).
expand_nodelist() {
    local list=$1 depth=0 item="" char i
    [[ -n $list ]] || die "empty Slurm nodelist"
    for ((i = 0; i < ${#list}; i++)); do
        char=${list:i:1}
        case $char in
            '[') depth=$((depth + 1)) ;;
            ']') depth=$((depth - 1)) ;;
        esac
        if [[ $char == , && $depth -eq 0 ]]; then
            _expand_nodelist_item "$item" "$list"
            item=""
        else
            item+=$char
        fi
    done
    _expand_nodelist_item "$item" "$list"
}

_expand_nodelist_item() {  # <item> <whole list, for the error message>
    local item=$1 prefix rest ranges suffix range lo hi n number
    local -a parts
    [[ -n $item && $item != *[[:space:]]* ]] || die "cannot parse Slurm nodelist '$2': empty or blank host"
    if [[ $item != *'['* ]]; then
        [[ $item != *']'* ]] || die "cannot parse Slurm nodelist '$2': unmatched ']'"
        printf '%s\n' "$item"
        return
    fi
    prefix=${item%%\[*}
    rest=${item#*\[}
    [[ $rest == *']'* ]] || die "cannot parse Slurm nodelist '$2': unmatched '['"
    ranges=${rest%%\]*}
    suffix=${rest#*\]}
    IFS=, read -r -a parts <<<"$ranges"
    ((${#parts[@]} > 0)) || die "cannot parse Slurm nodelist '$2': empty brackets"
    for range in "${parts[@]}"; do
        if [[ $range =~ ^([0-9]+)-([0-9]+)$ ]]; then
            lo=${BASH_REMATCH[1]}
            hi=${BASH_REMATCH[2]}
            ((10#$lo <= 10#$hi)) || die "cannot parse Slurm nodelist '$2': range $range goes down"
            for ((n = 10#$lo; n <= 10#$hi; n++)); do
                printf -v number '%0*d' "${#lo}" "$n"
                _expand_nodelist_item "$prefix$number$suffix" "$2"
            done
        elif [[ $range =~ ^[0-9]+$ ]]; then
            _expand_nodelist_item "$prefix$range$suffix" "$2"
        else
            die "cannot parse Slurm nodelist '$2': '$range' is not a number or a range a-b"
        fi
    done
}

# First host of a nodelist: `scontrol show hostnames` when Slurm's tools are here, the parser above otherwise.
first_host_of_nodelist() {
    local list=$1 hosts
    if command -v scontrol >/dev/null 2>&1 && hosts=$(scontrol show hostnames "$list" 2>/dev/null) && [[ -n $hosts ]]; then
        printf '%s\n' "${hosts%%$'\n'*}"
        return
    fi
    hosts=$(expand_nodelist "$list") || exit 2
    printf '%s\n' "${hosts%%$'\n'*}"
}
