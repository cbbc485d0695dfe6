# bash completion for usmc(1)                                -*- shell-script -*-

_usmc_ctl_keys()
{
    usmc ctl --json 2>/dev/null | sed -n 's/.*"key": "\([a-z_]*\)".*"runtime": true.*/\1=/p'
}

_usmc()
{
    local cur prev words cword
    _init_completion -n = || return

    local cmds="run stat dev lg ctl chk bench env version help"
    if [[ $cword -eq 1 ]]; then
        COMPREPLY=($(compgen -W "$cmds" -- "$cur"))
        return
    fi
    case ${words[1]} in
    run)
        case $prev in
        -R | --rundir) _filedir -d; return ;;
        -l | --lib) _filedir so; return ;;
        -r | --ring | -b | --busy-poll | -s | --spin | -a | --allow | -p | --ports) return ;;
        esac
        local i
        for ((i = 2; i < cword; i++)); do
            if [[ ${words[i]} == -- || ${words[i]} != -* ]]; then
                _command_offset $((i + (${words[i]} == -- ? 1 : 0)))
                return
            fi
        done
        COMPREPLY=($(compgen -W "-d --debug -r --ring -b --busy-poll -s --spin -R --rundir
            -a --allow -p --ports -t --tcp -l --lib -h --help --" -- "$cur"))
        ;;
    stat | stats)
        if [[ $cword -eq 2 ]]; then
            COMPREPLY=($(compgen -W "summary -a --all -d --details -l --listening --json --reset
                --help" -- "$cur"))
        elif [[ ${words[2]} == summary ]]; then
            COMPREPLY=($(compgen -W "--json --reset --help" -- "$cur"))
        else
            COMPREPLY=($(compgen -W "-a --all -d --details -l --listening --json --reset
                --help" -- "$cur"))
        fi
        ;;
    dev | device) COMPREPLY=($(compgen -W "--json --help" -- "$cur")) ;;
    lg | linkgroup) COMPREPLY=($(compgen -W "-a --all --json --help" -- "$cur")) ;;
    ctl)
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "--json --unset --reset --help" -- "$cur"))
        elif [[ $cur != *=* ]]; then
            compopt -o nospace
            COMPREPLY=($(compgen -W "$(_usmc_ctl_keys)" -- "$cur"))
        fi
        ;;
    chk | check)
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "--json --help" -- "$cur"))
        else
            _known_hosts_real -- "$cur"
        fi
        ;;
    bench)
        case $prev in
        --plot | --json-out | --tmpdir) _filedir; return ;;
        esac
        COMPREPLY=($(compgen -W "$(usmc bench --help 2>&1 | grep -o -- '--[a-z-]*' | sort -u)" \
            -- "$cur"))
        ;;
    env) COMPREPLY=($(compgen -W "--man --man-reasons" -- "$cur")) ;;
    esac
} &&
    complete -F _usmc usmc

# ex: filetype=sh
