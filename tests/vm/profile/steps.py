#!/usr/bin/env python3
"""make profile-vm: per cmsteps step, the instructions run (Ir) and the distinct
instructions run for the first time in the process ("new": what qemu's TCG
translates), all objects together, from callgrind dumps made with
--dump-instr=yes. Usage: steps.py DIR LABEL... (files DIR/st.LABEL.N).
steps.py DIR LABEL --new STEP: where one step's first-run instructions are, by
object and function (names need a build with symbols: PROFILE_LIB=build/symbols)."""
import collections
import glob
import re
import sys


def parse(path):
    """(trigger, {object: set of addresses}, {object: Ir}, {(object, function): set of
    addresses}) of one dump."""
    obs = {}
    fns = {}
    fn = None
    byfn = collections.defaultdict(set)
    cur = None
    addr = 0
    after_call = False
    npos = 1
    seen = collections.defaultdict(set)
    ir = collections.Counter()
    trig = ''
    for line in open(path):
        line = line.rstrip('\n')
        if not line:
            continue
        if line.startswith('desc: Trigger:'):
            trig = line.split(':', 2)[2].strip().replace('Client Request: ', '')
            continue
        if line.startswith('positions:'):
            npos = len(line.split()) - 1
            continue
        m = re.match(r'^(c?ob|c?fn|c?fi|c?fe|fl|fi|fe)=\((\d+)\)(?: (.*))?$', line)
        if m:
            key, idx, name = m.groups()
            if key.endswith('ob'):
                if name is not None:
                    obs[idx] = name
                if key == 'ob':
                    cur = obs.get(idx)
            elif key.endswith('fn'):
                if name is not None:
                    fns[idx] = name
                if key == 'fn':
                    fn = fns.get(idx)
            continue
        if line.startswith('calls='):
            after_call = True
            continue
        if line[0] in '0123456789+-*':
            parts = line.split()
            p = parts[0]
            if p.startswith('0x'):
                addr = int(p, 16)
            elif p[0] in '+-':
                v = int(p[1:], 16) if p[1:].startswith('0x') else int(p[1:])
                addr = addr + v if p[0] == '+' else addr - v
            if not after_call:
                seen[cur].add(addr)
                byfn[(cur, fn)].add(addr)
                if len(parts) > npos and parts[npos].isdigit():
                    ir[cur] += int(parts[npos])
            after_call = False
    return trig, seen, ir, byfn


def steps(prefix):
    files = glob.glob(prefix + '.[0-9]*')
    files.sort(key=lambda f: int(f.rsplit('.', 1)[1]))
    ever = collections.defaultdict(set)
    out = []
    for f in files:
        trig, seen, ir, _ = parse(f)
        new = sum(len(s - ever[o]) for o, s in seen.items())
        for o, s in seen.items():
            ever[o] |= s
        out.append((trig, sum(ir.values()), new))
    return out


def new_by_function(prefix, step, top=40):
    """Prints where the first-run instructions of step `step` (its name) are."""
    files = sorted(glob.glob(prefix + '.[0-9]*'), key=lambda f: int(f.rsplit('.', 1)[1]))
    ever = collections.defaultdict(set)
    for f in files:
        trig, seen, _, byfn = parse(f)
        if trig == step:
            rows = sorted(((len(a - ever[o]), (o or '?').split('/')[-1], fn or '?') for (o, fn), a in byfn.items()
                           if a - ever[o]), reverse=True)
            per_ob = collections.Counter()
            for n, o, _ in rows:
                per_ob[o] += n
            print(f'{step}: {sum(per_ob.values())} instructions run for the first time')
            for o, n in per_ob.most_common():
                print(f'{n:8d}  {o}')
            for n, o, fn in rows[:top]:
                print(f'{n:8d}  {o[:26]:26s}  {fn[:120]}')
            return
        for o, a in seen.items():
            ever[o] |= a
    print(f'no step {step} in {prefix}.N')


def main():
    if len(sys.argv) == 5 and sys.argv[3] == '--new':
        return new_by_function(f'{sys.argv[1]}/st.{sys.argv[2]}', sys.argv[4])
    d, labels = sys.argv[1], sys.argv[2:]
    res = {l: steps(f'{d}/st.{l}') for l in labels}
    names = [t for t, _, _ in res[labels[0]]]
    head = f"| {'step':14s} |" + ''.join(f" {l + ' Ir':>10s} | {l + ' new':>8s} |" for l in labels)
    if len(labels) == 2:
        head += f" {'Ir ratio':>8s} | {'new ratio':>9s} |"
    print(head)
    print('|' + '---|' * (1 + 2 * len(labels) + (2 if len(labels) == 2 else 0)))
    for i, name in enumerate(names):
        if name == 'setup':
            continue
        row = f"| {name:14s} |"
        vals = []
        for l in labels:
            _, ir, new = res[l][i] if i < len(res[l]) else ('', 0, 0)
            vals.append((ir, new))
            row += f" {ir:10d} | {new:8d} |"
        if len(labels) == 2 and vals[0][0] and vals[0][1]:
            row += f" {vals[1][0] / vals[0][0]:8.2f} | {vals[1][1] / vals[0][1]:9.2f} |"
        print(row)


if __name__ == '__main__':
    main()
