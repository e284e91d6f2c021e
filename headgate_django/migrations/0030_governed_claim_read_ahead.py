"""PostgreSQL only: the governed claim reads the round-robin's partitions ahead, several per
statement, as the portable claim does (``store.fairness.FairSource``).

Migration 0028's ``headgate_claim_governed`` walked a fair queue one visit at a time: an
index probe for the next partition and a statement for the partition's next jobs, each
visit, so a claim of 500 over 25 tenants at quantum 10 sent about a hundred statements
from the function. Now the first read of a partition in a claim also:

- finds the queue's partitions in key order, up to 64, in one recursive statement (the
  ones after it: those of the list after its key; past 64, a second walk from it, as
  ``FairSource._discover``), and remembers each one's successor, so the walk's later steps
  need no probe;
- reads, in one statement, the next jobs of it and of the partitions after it that this
  claim has not read yet, as many of each as its share for as many rounds of the rotation
  as the claim likely needs (a LATERAL read of the fair index per partition).

A visit takes its jobs from what was read ahead exactly as a fresh read would return them:
the jobs of classes closed since are left out (a class does not reopen within a claim),
and when what was read ahead is fewer than the visit asks for and the partition had more
waiting, the visit reads afresh as before (leaving out what the partition handed out), so
no decision depends on when a partition's jobs were read. The classes that can admit
nothing are recomputed only after a bucket fell below one token, the only way within a
claim that the set grows.

Two more steps cost less without deciding differently: a visit's step at once over jobs of
weight 1 in one class (or none) needs no statement and admits them straight from what was
read ahead; and the lease update joins the admitted rows' addresses with their places in
the order admitted, so it returns the positions itself and no list of admitted ids is kept.

``tests/conformance/test_governed_claim_function.py`` compares every decision with the
portable claim's, with claims large enough to read ahead, revisit partitions and run out of
what was read ahead; reversing this migration restores 0028's function.
"""

from importlib import import_module

from django.db import migrations

_0028 = import_module("headgate_django.migrations.0028_governed_claim_function")
_BEFORE = _0028.CREATE
#: Partitions one discovery finds at most each way (``store.fairness._DISCOVER``).
_DISCOVER = 64

_DECLARE = """
    v_cdirty boolean := true; n_from varchar[] := '{}'; n_to varchar[] := '{}'; v_ni integer;
    pf_keys varchar[] := '{}'; pf_start integer[] := '{}'; pf_pos integer[] := '{}';
    pf_end integer[] := '{}'; pf_exh boolean[] := '{}'; pf_live boolean[] := '{}';
    q_id varchar[] := '{}'; q_tid tid[] := '{}'; q_cls varchar[] := '{}'; q_w integer[] := '{}';
    x_id varchar[]; x_tid tid[]; x_cls varchar[]; x_w integer[]; x_cnt integer[];
    d_fwd varchar[]; d_wrap varchar[]; d_order varchar[]; rd_keys varchar[]; rd_n integer[];
    v_pf integer; v_ask integer; v_take integer; v_last integer; v_at integer; v_acc integer;
    v_rounds integer; v_pk varchar; v_served boolean;
    pf_uni boolean[] := '{}'; pf_ucls varchar[] := '{}'; x_uni boolean[]; x_ucls varchar[];"""

# A step to the next partition that a discovery already answered needs no probe.
_NEXT_PARTITION = f"""
            v_ni := CASE WHEN v_incl THEN NULL ELSE array_position(n_from, v_key) END;
            IF v_ni IS NOT NULL THEN
                v_p := n_to[v_ni];
            ELSE{_0028._NEXT_PARTITION.replace(chr(10), chr(10) + "    ")}
            END IF;"""

_PROBE = _0028._PROBE

def _walk(into: str, name: str, op: str, start: str, indent: int) -> str:
    """``SELECT … INTO into``: up to ``_DISCOVER`` partition keys in key order, from the
    first ``op start``, one index probe each (a recursive walk named ``name``)."""
    pad = " " * indent
    return (
        f"{pad}SELECT coalesce(array_agg({name}.k ORDER BY {name}.n), '{{}}') INTO {into}\n"
        f"{pad}  FROM (WITH RECURSIVE\n"
        f"{pad}          {name} (k, n) AS (SELECT {_PROBE.format(op=op, key=start)}, 1\n"
        f"{pad}                       UNION ALL\n"
        f"{pad}                       SELECT {_PROBE.format(op='>', key=name + '.k')}, "
        f"{name}.n + 1\n"
        f"{pad}                         FROM {name} WHERE {name}.k IS NOT NULL "
        f"AND {name}.n < {_DISCOVER})\n"
        f"{pad}        SELECT {name}.n, {name}.k FROM {name} WHERE {name}.k IS NOT NULL) {name};"
    )


# The partitions after v_p and from the start, in key order; then the order the rotation
# visits them in from v_p and each one's successor (``FairSource._learn``).
_DISCOVERY = f"""
{_walk("d_wrap", "w", ">=", "''", 28)}
                            IF cardinality(d_wrap) < {_DISCOVER} THEN
                                d_fwd := coalesce((SELECT array_agg(t.k ORDER BY t.o)
                                                     FROM unnest(d_wrap) WITH ORDINALITY AS t (k, o)
                                                    WHERE t.k COLLATE "C" > v_p COLLATE "C"), '{{}}');
                            ELSE
{_walk("d_fwd", "f", ">", "v_p", 32)}
                            END IF;
                            d_order := d_fwd;
                            IF cardinality(d_fwd) < {_DISCOVER} THEN
                                d_order := d_fwd || coalesce((SELECT array_agg(t.k ORDER BY t.o)
                                                                FROM unnest(d_wrap) WITH ORDINALITY AS t (k, o)
                                                               WHERE NOT (t.k = ANY(d_fwd))), '{{}}');
                            END IF;
                            IF cardinality(d_order) > 0 THEN
                                n_from := n_from || v_p || d_order[1:cardinality(d_order) - 1];
                                n_to := n_to || d_order;
                                IF cardinality(d_fwd) < {_DISCOVER} AND cardinality(d_wrap) < {_DISCOVER} THEN
                                    n_from := n_from || d_order[cardinality(d_order)];
                                    n_to := n_to || d_order[1];
                                END IF;
                            END IF;"""

# What to read of each: v_p's visit and, for it and each partition after it not read yet
# in this claim, its share for each round the claim will likely take (all of the rotation
# is known: as many rounds as its shares fill the claim; otherwise one), until they add up
# to what the claim still needs.
_SIZES = f"""
                            v_rounds := 1;
                            IF cardinality(d_fwd) < {_DISCOVER} AND cardinality(d_wrap) < {_DISCOVER} THEN
                                v_acc := 0;
                                FOREACH v_pk IN ARRAY d_order LOOP
                                    v_acc := v_acc + least(coalesce((v_def ->> v_pk)::integer, 0), v_cap) + v_quantum;
                                END LOOP;
                                v_rounds := greatest(1, ceil((v_want - v_got)::numeric / greatest(v_acc, 1))::integer);
                            END IF;
                            rd_keys := ARRAY[v_p];
                            rd_n := ARRAY[least(v_want - v_got, v_ask + (v_rounds - 1)
                                          * (least(coalesce((v_def ->> v_p)::integer, 0), v_cap) + v_quantum))];
                            v_acc := rd_n[1];
                            FOREACH v_pk IN ARRAY d_order LOOP
                                EXIT WHEN v_acc >= v_want - v_got OR cardinality(rd_keys) >= {_DISCOVER};
                                CONTINUE WHEN v_pk = v_p OR v_pk = ANY(v_full) OR v_pk = ANY(pf_keys)
                                              OR v_pseen ? v_pk OR v_held ? v_pk;
                                rd_keys := rd_keys || v_pk;
                                rd_n := rd_n || least(v_want - v_got, v_rounds
                                                * (least(coalesce((v_def ->> v_pk)::integer, 0), v_cap) + v_quantum));
                                v_acc := v_acc + rd_n[cardinality(rd_n)];
                            END LOOP;"""

# Their jobs in one statement: each partition's first, in claim order, of the classes open
# now (none of them has handed out any in this claim), laid end to end by partition.
_ORDER = _0028._ORDER
_READ = f"""
                            WITH w AS MATERIALIZED (
                                     SELECT t.p, t.n, t.i FROM unnest(rd_keys, rd_n) WITH ORDINALITY AS t (p, n, i)),
                                 ra AS MATERIALIZED (
                                     SELECT w.i, j.o, j.id, j.ctid, j.rate_class, j.weight
                                       FROM w CROSS JOIN LATERAL (
                                            SELECT j.*, row_number() OVER () AS o FROM (
                                            SELECT j.id, j.ctid, j.rate_class, j.weight
                                              FROM headgate_job j
                                             WHERE j.state = 'available' AND j.queue = p_queue AND j.partition_key = w.p
                                               AND (p_kinds IS NULL OR j.kind = ANY(p_kinds))
                                               AND (j.rate_class IS NULL OR NOT (j.rate_class = ANY(v_closed)))
                                             ORDER BY {_ORDER} LIMIT w.n) j) j),
                                 g AS MATERIALIZED (
                                     SELECT w.i, count(ra.i)::integer AS n, min(ra.rate_class) AS c,
                                            coalesce(bool_and(ra.weight = 1), true)
                                            AND (count(ra.rate_class) = 0 OR count(ra.rate_class) = count(ra.i)
                                                 AND min(ra.rate_class) = max(ra.rate_class)) AS uni
                                       FROM w LEFT JOIN ra ON ra.i = w.i GROUP BY w.i)
                            -- The aggregates read the ordered subquery as is (one sort).
                            SELECT coalesce(array_agg(o.id), '{{}}'), coalesce(array_agg(o.ctid), '{{}}'),
                                   coalesce(array_agg(o.rate_class), '{{}}'), coalesce(array_agg(o.weight), '{{}}'),
                                   (SELECT array_agg(g.n ORDER BY g.i) FROM g),
                                   (SELECT array_agg(g.uni ORDER BY g.i) FROM g),
                                   (SELECT array_agg(g.c ORDER BY g.i) FROM g)
                              INTO x_id, x_tid, x_cls, x_w, x_cnt, x_uni, x_ucls
                              FROM (SELECT ra.* FROM ra ORDER BY ra.i, ra.o) o;
                            v_acc := cardinality(q_id);
                            q_id := q_id || x_id; q_tid := q_tid || x_tid;
                            q_cls := q_cls || x_cls; q_w := q_w || x_w;
                            FOR v_i IN 1..cardinality(rd_keys) LOOP
                                pf_keys := pf_keys || rd_keys[v_i];
                                pf_start := pf_start || (v_acc + 1);
                                pf_pos := pf_pos || (v_acc + 1);
                                v_acc := v_acc + x_cnt[v_i];
                                pf_end := pf_end || v_acc;
                                pf_exh := pf_exh || (x_cnt[v_i] < rd_n[v_i]);
                                pf_live := pf_live || true;
                                pf_uni := pf_uni || x_uni[v_i];
                                pf_ucls := pf_ucls || x_ucls[v_i];
                            END LOOP;"""

# The visit's next v_ask jobs from what was read ahead, of the classes still open: what a
# fresh read would return if there are v_ask of them, or if the partition had no more
# waiting than were read ahead; otherwise nothing is taken and the visit reads afresh.
_TAKE = """
                            v_at := pf_pos[v_pf];
                            IF cardinality(v_closed) = 0 THEN
                                v_take := least(v_ask, pf_end[v_pf] - v_at + 1);
                                v_last := v_take;
                            ELSE
                                SELECT coalesce(array_agg(q_id[v_at + t.o - 1] ORDER BY t.o), '{}'),
                                       array_agg(q_tid[v_at + t.o - 1] ORDER BY t.o),
                                       array_agg(q_cls[v_at + t.o - 1] ORDER BY t.o),
                                       array_agg(q_w[v_at + t.o - 1] ORDER BY t.o),
                                       count(*)::integer, coalesce(max(t.o), 0)::integer
                                  INTO h_id, h_tid, h_cls, h_w, v_take, v_last
                                  FROM (SELECT t.o FROM unnest(q_cls[v_at:pf_end[v_pf]]) WITH ORDINALITY AS t (c, o)
                                         WHERE t.c IS NULL OR NOT (t.c = ANY(v_closed))
                                         LIMIT v_ask) t;
                            END IF;
                            IF v_take = v_ask OR pf_exh[v_pf] THEN
                                pf_pos[v_pf] := v_at + v_last;
                                v_served := true;
                            ELSE
                                pf_live[v_pf] := false;
                            END IF;"""

# Such a step at once, when the partition's free slots and the class's bucket take them all
# (the checks of the step at once below, for one class and weight 1): admitted straight from
# what was read ahead, without copying them out first (a slice of a long list copies all of
# it), and the visit goes on. Otherwise the step below decides, and refuses them the same way.
_UNIFORM = """
                            IF v_known AND v_fast AND v_take > 0 THEN
                                v_cmin := pf_ucls[v_pf];
                                v_f := CASE WHEN v_max IS NOT NULL THEN array_position(f_keys, v_p) END;
                                v_bi := CASE WHEN v_cmin IS NOT NULL THEN array_position(b_names, v_cmin) END;
                                IF (v_max IS NULL OR coalesce(f_free[v_f], v_max) >= v_take)
                                   AND (v_bi IS NULL OR (NOT b_paused[v_bi] AND b_tokens[v_bi] >= v_take)) THEN
                                    IF v_bi IS NOT NULL THEN
                                        b_tokens[v_bi] := b_tokens[v_bi] - v_take;
                                        v_cdirty := v_cdirty OR b_tokens[v_bi] < 1;
                                        b_spent[v_bi] := true;
                                    END IF;
                                    IF v_max IS NULL THEN
                                        NULL;
                                    ELSIF v_f IS NULL THEN
                                        f_keys := f_keys || v_p;
                                        f_free := f_free || (v_max - v_take);
                                    ELSE
                                        f_free[v_f] := f_free[v_f] - v_take;
                                    END IF;
                                    v_tids := v_tids || q_tid[v_at:v_at + v_take - 1];
                                    v_cur := v_cur - v_take;
                                    v_got := v_got + v_take;
                                    h_id := '{}';
                                    v_known := false;
                                    CONTINUE;
                                END IF;
                            END IF;"""

# A partition's next jobs: from what was read ahead when that answers (reading ahead at its
# first read in the claim), afresh otherwise, leaving out what it handed out before
# (through what was read ahead and through fresh reads).
_FRESH_READ_START = (
    "                        -- In claim order: the aggregates read the ordered subquery as is.\n"
)
_FRESH_READ_END = "                        v_seen := v_seen || h_id;\n"
_VISIT_READ_HEAD = f"""                        v_ask := least(v_cur, v_want - v_got);
                        v_pf := array_position(pf_keys, v_p);
                        IF v_pf IS NULL AND NOT (v_pseen ? v_p) THEN{_DISCOVERY}{_SIZES}{_READ}
                            v_pf := array_position(pf_keys, v_p);
                        END IF;
                        v_served := false;
                        IF v_pf IS NOT NULL AND pf_live[v_pf] THEN{_TAKE}
                        END IF;
                        IF v_served THEN
                            h_i := 1;
                            -- Jobs of weight 1 in one class (or none) read in order: the
                            -- figures of the visit's step at once need no statement.
                            v_known := cardinality(v_closed) = 0 AND pf_uni[v_pf];{_UNIFORM}
                            IF cardinality(v_closed) = 0 THEN
                                h_id := q_id[v_at:v_at + v_take - 1]; h_tid := q_tid[v_at:v_at + v_take - 1];
                                h_cls := q_cls[v_at:v_at + v_take - 1]; h_w := q_w[v_at:v_at + v_take - 1];
                            END IF;
                            IF v_known THEN
                                v_k := v_take; v_s := v_take;
                                v_cmin := CASE WHEN v_take > 0 THEN pf_ucls[v_pf] END; v_cmax := v_cmin;
                                v_cw := CASE WHEN v_cmin IS NOT NULL THEN v_take ELSE 0 END;
                            END IF;
                        ELSE
                            v_seen := CASE WHEN v_pf IS NULL THEN '{{}}'
                                           ELSE q_id[pf_start[v_pf]:pf_pos[v_pf] - 1] END
                                      || CASE WHEN v_pseen ? v_p
                                              THEN ARRAY(SELECT jsonb_array_elements_text(v_pseen -> v_p))
                                              ELSE '{{}}' END;
"""
_VISIT_READ_TAIL = """                            v_pseen := v_pseen || jsonb_build_object(
                                v_p, coalesce(v_pseen -> v_p, '[]') || to_jsonb(h_id));
                        END IF;
"""

_CLOSED_BEFORE = """
                IF cardinality(b_names) > 0 THEN
                    v_closed := ARRAY(SELECT b_names[i] FROM generate_subscripts(b_names, 1) i
                                      WHERE b_paused[i] OR b_tokens[i] < 1);
                END IF;"""
_CLOSED_AFTER = """
                IF v_cdirty AND cardinality(b_names) > 0 THEN
                    v_closed := ARRAY(SELECT b_names[i] FROM generate_subscripts(b_names, 1) i
                                      WHERE b_paused[i] OR b_tokens[i] < 1);
                END IF;
                v_cdirty := false;"""

_SEEN_AT_VISIT_START = """                -- What this partition handed out earlier in the claim (only its own: the
                -- reads below test each row against it).
                IF v_pseen ? v_p THEN
                    v_seen := ARRAY(SELECT jsonb_array_elements_text(v_pseen -> v_p));
                ELSE
                    v_seen := '{}';
                END IF;
"""
_SEEN_AT_VISIT_END = """                IF cardinality(v_seen) > 0 THEN
                    v_pseen := v_pseen || jsonb_build_object(v_p, to_jsonb(v_seen));
                END IF;
"""


def _read_block(before: str) -> str:
    """The visit's fresh read, now the fallback of what was read ahead."""
    start = before.index(_FRESH_READ_START)
    end = before.index(_FRESH_READ_END, start) + len(_FRESH_READ_END)
    fresh = before[start:end]
    assert fresh.count("v_known := true;") == 1 and fresh.count("h_i := 1;") == 1
    fresh = fresh.replace(_FRESH_READ_END, "")
    indented = "".join("    " + line if line.strip() else line for line in fresh.splitlines(True))
    return before[:start] + _VISIT_READ_HEAD + indented + _VISIT_READ_TAIL + before[end:]


# The lease: each admitted row's address joined with its place in the order admitted, so
# the update hands back positions itself (a nested loop of TID scans, one per address);
# no list of ids is kept for a join after it.
_LEASE_BEFORE = _BEFORE[
    _BEFORE.index("    -- Each leased row with its place") : _BEFORE.index(
        'ON a.id COLLATE "C" = l.id;'
    )
    + len('ON a.id COLLATE "C" = l.id;')
]
_LEASE = f"""    RETURN QUERY
        UPDATE headgate_job AS j SET
            state = 'running', lease_id = p_lease_id, fence = j.fence + 1,
            claimed_by = p_worker, claimed_at = clock_timestamp(),
            lease_expires_at = clock_timestamp() + p_ttl_ms * interval '1 millisecond'
          FROM unnest(v_tids) WITH ORDINALITY AS a (t, n)
         WHERE j.ctid = a.t
        RETURNING a.n::integer, {", ".join("j." + c for c, _ in _0028._RETURNED)};"""

_EDITS = [  # (text of the function before, after, how many times it occurs)
    (_LEASE_BEFORE, _LEASE, 1),
    ("v_admitted varchar[] := '{}'; ", "", 1),
    ("cardinality(v_admitted)", "cardinality(v_tids)", 3),
    ("                        v_admitted := v_admitted || c_id;\n", "", 2),
    ("                            v_admitted := v_admitted || h_id[h_i:h_i + v_k - 1];\n", "", 1),
    (
        "v_cmax varchar; v_cw bigint; v_tokens double precision[]; v_spent boolean[];",
        "v_cmax varchar; v_cw bigint; v_tokens double precision[]; v_spent boolean[];" + _DECLARE,
        1,
    ),
    (_0028._NEXT_PARTITION, _NEXT_PARTITION, 1),
    (_CLOSED_BEFORE, _CLOSED_AFTER, 2),
    (
        "b_tokens[v_bi] := b_tokens[v_bi] - c_w;",
        "b_tokens[v_bi] := b_tokens[v_bi] - c_w;\n"
        "                            v_cdirty := v_cdirty OR b_tokens[v_bi] < 1;",
        2,
    ),
    (
        "b_tokens[v_bi] := b_tokens[v_bi] - v_cw;",
        "b_tokens[v_bi] := b_tokens[v_bi] - v_cw;\n"
        "                                v_cdirty := v_cdirty OR b_tokens[v_bi] < 1;",
        1,
    ),
    (
        "b_tokens := v_tokens;",
        "b_tokens := v_tokens;\n                                v_cdirty := true;",
        1,
    ),
    (_SEEN_AT_VISIT_START, "", 1),
    (_SEEN_AT_VISIT_END, "", 1),
]
CREATE = _BEFORE
for _old, _new, _count in _EDITS:
    assert CREATE.count(_old) == _count, _old
    CREATE = CREATE.replace(_old, _new)
CREATE = _read_block(CREATE)


def forward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def backward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_BEFORE)


class Migration(migrations.Migration):
    dependencies = [("headgate_django", "0029_mysql_fair_twin")]
    operations = [migrations.RunPython(forward, backward)]
