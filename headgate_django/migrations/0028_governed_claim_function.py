"""PostgreSQL only: the claim of a governed queue is one function call, as the plain claim is.

``store.admitted`` claims a governed queue in one transaction of about a dozen statements
sent from Python: the queue's lock with its ceiling, the running count per partition, the
rate buckets, the fairness row, the partition probes, the candidates, the writes back and
the lease. On PostgreSQL ``headgate_claim_governed(queue, …)`` runs the same steps on the
server, in one round trip:

1. yield nothing for a queue with no waiting job (a claim that finds nothing writes
   nothing, so it need not take the lock, whose row lock would make its commit wait for
   the disk); lock the queue's ``headgate_queue_state`` row and read its ceiling; a queue
   no longer governed, or paused, yields nothing. A ceiling that disposes of jobs (``discard``,
   ``cancel_incoming``, ``cancel_running``) yields one row at position 0 and nothing else:
   disposal runs hooks written in Python, so the caller claims that queue on the portable
   path (``store.admitted``) instead;
2. count the queue's running jobs per partition, lock every rate bucket in name order and
   refill each to the store clock's now;
3. with a ``headgate_fairness`` row, walk the deficit round-robin over the partitions
   (``kernel.fairness.Walk``, step for step); without one, pass over candidates in claim
   order (``store.admitted._Admission.run``, pass for pass). Each candidate meets the rate
   class first and the ceiling second, as in ``_Admission.consider``;
4. write back the spent buckets, the rotation and the carried credit, lease the admitted
   jobs by the row addresses their candidate read saw, and with ``p_weighted`` add what it
   leased to the queue's ledger (``store.weights.ledger_add``);
5. if it leased all ``p_limit``, raise the ledgers of the queues that ran dry earlier in
   the same claim to the levels ``store.weights`` computed (``p_level_names``,
   ``p_level_values``), unless one of their rows is locked, and say so with a row at
   position -1: while a queue is dry this saves the separate update, and its commit, that
   each claim would otherwise make after it.

Rows come back as ``pos`` (the order admitted, which a worker starts them in) and the
columns of ``store.claim.COLUMNS``. The Python code is the reference for every rule: ``kernel.admission.refill`` and
``spend_needed`` for the buckets (``headgate_refill`` and the spend test below repeat them),
``kernel.fairness.Walk`` for the round-robin, and ``tests/conformance/
test_governed_claim_function.py`` claims the same jobs both ways and compares what each
admitted and wrote, so the two cannot drift apart unnoticed.

The leasing update names only the candidates' row addresses (see migration 0022): the
queue's lock keeps other claims off these rows, and a row that anything else updated
after the candidate read has a new address, so it is left waiting, not leased.
"""

from django.db import migrations

# What a claim reads of one partition (the fair walk) or of the queue (claim order).
#
# Each plan is generic, made once per session, so it cannot count on the queue being a
# small part of the table; read through the wrong index (``headgate_job_claim_all``,
# ``headgate_job_fp_waiting``), a read would scan every other queue's waiting jobs to find
# this one's. So the reads are written so that only the right index serves them: the
# probes order by ``partition_key`` (only ``headgate_job_fair`` holds that order), and
# the read in claim order repeats ``queue = p_queue`` as a range, which the planner counts
# as more selective and can only use as ``headgate_job_claim``'s index condition.
_ORDER = "j.priority DESC, j.scheduled_at, j.id"
_BY_QUEUE = " AND j.queue >= p_queue AND j.queue <= p_queue"
_WAITING = (
    "j.state = 'available' AND j.queue = p_queue{more}\n"
    "              AND (p_kinds IS NULL OR j.kind = ANY(p_kinds))\n"
    "              AND NOT (j.id = ANY(v_seen))\n"
    "              AND (j.rate_class IS NULL OR NOT (j.rate_class = ANY(v_closed)))"
)

# The first partition with waiting jobs after v_key (at it too, with v_incl), wrapping
# around to the smallest: ``FairSource.next_partition``.
_PROBE = (
    "(SELECT j.partition_key FROM headgate_job j WHERE j.state = 'available'"
    " AND j.queue = p_queue AND j.partition_key {op} {key} ORDER BY j.partition_key LIMIT 1)"
)
_NEXT_PARTITION = f"""
            IF v_incl THEN
                v_p := {_PROBE.format(op=">=", key="v_key")};
            ELSE
                v_p := {_PROBE.format(op=">", key="v_key")};
            END IF;
            IF v_p IS NULL THEN
                v_p := {_PROBE.format(op=">=", key="''")};
            END IF;"""

# The classes that can admit nothing now: ``store.buckets.Buckets.closed``.
_CLOSED = """
                IF cardinality(b_names) > 0 THEN
                    v_closed := ARRAY(SELECT b_names[i] FROM generate_subscripts(b_names, 1) i
                                      WHERE b_paused[i] OR b_tokens[i] < 1);
                END IF;"""

# One candidate (c_id, c_part, c_cls, c_w) meets the rate class, then the ceiling
# (``_Admission.consider``, under ``queue``): v_verdict is 'admitted', 'full' or 'passed'.
# f_keys/f_free hold the free slots of the partitions seen so far.
_CONSIDER = """
                v_bi := CASE WHEN c_cls IS NOT NULL THEN array_position(b_names, c_cls) END;
                IF v_bi IS NOT NULL
                   AND (b_paused[v_bi] OR b_tokens[v_bi] < headgate_spend_needed(c_w, b_burst[v_bi])) THEN
                    v_verdict := 'passed';
                ELSE
                    v_verdict := 'admitted';
                    IF v_max IS NOT NULL THEN
                        v_f := array_position(f_keys, c_part);
                        IF v_f IS NULL THEN
                            f_keys := f_keys || c_part;
                            f_free := f_free || v_max;
                            v_f := cardinality(f_keys);
                        END IF;
                        IF f_free[v_f] > 0 THEN
                            f_free[v_f] := f_free[v_f] - 1;
                        ELSE
                            IF NOT (c_part = ANY(v_full)) THEN
                                v_full := v_full || c_part;
                            END IF;
                            v_verdict := 'full';
                        END IF;
                    END IF;
                    IF v_verdict = 'admitted' THEN
                        IF v_bi IS NOT NULL THEN
                            b_tokens[v_bi] := b_tokens[v_bi] - c_w;
                            b_spent[v_bi] := true;
                        END IF;
                        v_admitted := v_admitted || c_id;
                        v_tids := v_tids || c_tid;
                    END IF;
                END IF;"""

# A partition's carried credit after a visit: ``Walk._carry`` (v_carry is the credit left).
_CARRY = """
                    v_carry := least(greatest(v_carry, 0), v_cap);
                    IF coalesce((v_def ->> v_p)::integer, 0) <> v_carry
                       AND NOT (v_p = ANY(v_touched)) THEN
                        v_touched := v_touched || v_p;
                    END IF;
                    IF v_carry > 0 THEN
                        v_def := v_def || jsonb_build_object(v_p, v_carry);
                    ELSE
                        v_def := v_def - v_p;
                    END IF;"""

# What the held jobs from h_i that the credit takes weigh: how many (v_k), their cost
# (v_s), the least and greatest rate class among them (v_cmin, v_cmax) and the weight of
# those with a class (v_cw). t.s is the running cost (``Walk.cost``) in claim order.
_COST_SUM = "sum(greatest(1, least(t.w, v_quantum + v_cap))) OVER (ORDER BY {order} ROWS UNBOUNDED PRECEDING)"
_PREFIX = (
    "count(*) FILTER (WHERE t.s <= v_cur)::integer,"
    " coalesce(max(t.s) FILTER (WHERE t.s <= v_cur), 0)::integer,"
    " min(t.c) FILTER (WHERE t.s <= v_cur), max(t.c) FILTER (WHERE t.s <= v_cur),"
    " coalesce(sum(t.w) FILTER (WHERE t.s <= v_cur AND t.c IS NOT NULL), 0)::bigint"
)

# Inside a visit: the held jobs that the credit and the claim still take (v_k of them,
# costing v_s), admitted in one step when neither the ceiling nor a bucket could refuse
# any of them (the partition has v_k free slots, and each class's bucket holds at least
# what they weigh, so every one of them passes whichever others came before it). That is
# exactly what the one-by-one steps after it would decide; they decide the job that ends
# the visit, and every job of a visit where a rule could refuse one. A fresh read of the
# partition's jobs computes the same figures itself (v_known).
_AT_ONCE = f"""
                    IF v_fast THEN
                        IF NOT v_known THEN
                            SELECT {_PREFIX} INTO v_k, v_s, v_cmin, v_cmax, v_cw
                              FROM (SELECT t.c, t.w, {_COST_SUM.format(order="t.k")} AS s
                                      FROM unnest(h_cls[h_i:], h_w[h_i:]) WITH ORDINALITY AS t (c, w, k)
                                     WHERE t.k <= v_want - v_got) t;
                        END IF;
                        v_known := false;
                        IF v_k > 0 AND v_max IS NOT NULL THEN
                            v_f := array_position(f_keys, v_p);
                            v_fast := coalesce(f_free[v_f], v_max) >= v_k;
                        END IF;
                        IF v_k > 0 AND v_fast AND v_cmin IS NOT NULL AND v_cmin = v_cmax THEN
                            v_bi := array_position(b_names, v_cmin);
                            IF v_bi IS NULL THEN
                                NULL;
                            ELSIF b_paused[v_bi] OR b_tokens[v_bi] < v_cw THEN
                                v_fast := false;
                            ELSE
                                b_tokens[v_bi] := b_tokens[v_bi] - v_cw;
                                b_spent[v_bi] := true;
                            END IF;
                        ELSIF v_k > 0 AND v_fast AND v_cmin IS NOT NULL AND cardinality(b_names) > 0 THEN
                            SELECT array_agg(b_tokens[i] - coalesce(u.w, 0) ORDER BY i),
                                   array_agg(b_spent[i] OR u.w IS NOT NULL ORDER BY i),
                                   coalesce(bool_and(u.w IS NULL
                                                     OR (NOT b_paused[i] AND b_tokens[i] >= u.w)), true)
                              INTO v_tokens, v_spent, v_fast
                              FROM generate_subscripts(b_names, 1) AS i
                              LEFT JOIN (SELECT t.c, sum(t.w) AS w
                                           FROM unnest(h_cls[h_i:h_i + v_k - 1], h_w[h_i:h_i + v_k - 1])
                                                AS t (c, w)
                                          GROUP BY t.c) u ON u.c = b_names[i];
                            IF v_fast THEN
                                b_tokens := v_tokens;
                                b_spent := v_spent;
                            END IF;
                        END IF;
                        IF v_k > 0 AND v_fast THEN
                            IF v_max IS NULL THEN
                                NULL;
                            ELSIF v_f IS NULL THEN
                                f_keys := f_keys || v_p;
                                f_free := f_free || (v_max - v_k);
                            ELSE
                                f_free[v_f] := f_free[v_f] - v_k;
                            END IF;
                            v_admitted := v_admitted || h_id[h_i:h_i + v_k - 1];
                            v_tids := v_tids || h_tid[h_i:h_i + v_k - 1];
                            h_i := h_i + v_k;
                            v_cur := v_cur - v_s;
                            v_got := v_got + v_k;
                            CONTINUE;
                        END IF;
                    END IF;"""

# The columns a claim hands the worker (``store.claim.COLUMNS``), returned as columns, not
# as the table's row type: reading the fields of a row value costs the caller's query more
# than the claim itself for a large claim.
_RETURNED = [
    ("id", "varchar"),
    ("kind", "varchar"),
    ("queue", "varchar"),
    ("payload", "bytea"),
    ("schema_version", "integer"),
    ("attempt", "integer"),
    ("crash_attempt", "integer"),
    ("max_attempts", "integer"),
    ("fence", "bigint"),
    ("timeout", "interval"),
    ("retention", "interval"),
    ("checkpoint", "jsonb"),
    ("cp_cursor", "bytea"),
    ("workflow_id", "varchar"),
    ("rate_class", "varchar"),
    ("weight", "integer"),
    ("deadline", "timestamptz"),
]
_COLUMNS_OUT = ", ".join(f"{c} {t}" for c, t in _RETURNED)

REFILL = """
CREATE OR REPLACE FUNCTION headgate_refill(
    p_tokens double precision, p_burst integer, p_limit integer, p_window_ms bigint,
    p_elapsed_ms bigint
) RETURNS double precision LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN p_elapsed_ms <= 0 THEN p_tokens
                ELSE least(p_burst::double precision,
                           p_tokens + p_elapsed_ms::double precision * p_limit / p_window_ms)
           END
$$;
CREATE OR REPLACE FUNCTION headgate_spend_needed(p_weight integer, p_burst integer)
RETURNS integer LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT least(p_weight, p_burst)
$$;
"""

CREATE = f"""
CREATE OR REPLACE FUNCTION headgate_claim_governed(
    p_queue varchar, p_limit integer, p_kinds varchar[],
    p_lease_id varchar, p_worker varchar, p_ttl_ms bigint, p_weighted boolean,
    p_level_names varchar[], p_level_values bigint[]
) RETURNS TABLE (pos integer, {_COLUMNS_OUT})
LANGUAGE plpgsql VOLATILE
SET enable_indexscan = on
SET enable_bitmapscan = off
SET enable_seqscan = off
SET enable_sort = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_admission boolean; v_paused boolean; v_max integer; v_strategy varchar;
    f_keys varchar[] := '{{}}'; f_free integer[] := '{{}}'; v_full varchar[] := '{{}}';
    v_now_ms bigint;
    b_names varchar[]; b_burst integer[]; b_paused boolean[]; b_tokens double precision[];
    b_spent boolean[];
    v_closed varchar[] := '{{}}';
    v_admitted varchar[] := '{{}}'; v_tids tid[] := '{{}}'; v_seen varchar[] := '{{}}';
    c_id varchar; c_tid tid; c_part varchar; c_cls varchar; c_w integer;
    v_bi integer; v_f integer; v_verdict text;
    v_want integer; v_found integer; r record;
    -- the round-robin
    v_fair boolean; v_quantum integer; v_cap integer; v_turn varchar; v_credit integer;
    v_turn0 varchar; v_credit0 integer; v_def jsonb; v_touched varchar[] := '{{}}';
    v_key varchar; v_incl boolean; v_resume boolean; v_first boolean := true;
    v_p varchar; v_cur integer; v_got integer; v_total integer := 0; v_ended boolean;
    v_passed boolean; v_fruitless varchar; v_carry integer; v_cost integer;
    v_held jsonb := '{{}}'; v_pseen jsonb := '{{}}'; h_id varchar[]; h_tid tid[]; h_cls varchar[]; h_w integer[];
    h_i integer; v_n integer;
    v_fast boolean; v_known boolean := false; v_k integer; v_s integer; v_cmin varchar;
    v_cmax varchar; v_cw bigint; v_tokens double precision[]; v_spent boolean[];
BEGIN
    -- A claim that finds nothing changes nothing, so a queue with nothing waiting is not
    -- locked: its lock would write, and its commit wait for the disk.
    PERFORM FROM headgate_job j WHERE j.state = 'available' AND j.queue = p_queue
                 AND (p_kinds IS NULL OR j.kind = ANY(p_kinds))
               ORDER BY j.partition_key LIMIT 1;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT q.admission, q.paused, c.max_concurrent, c.on_saturated
      INTO v_admission, v_paused, v_max, v_strategy
      FROM headgate_queue_state q LEFT JOIN headgate_concurrency_limit c ON c.queue = q.name
     WHERE q.name = p_queue
       FOR UPDATE OF q;
    IF NOT FOUND OR NOT v_admission OR v_paused THEN
        RETURN;
    END IF;
    IF v_max IS NOT NULL AND v_strategy <> 'queue' THEN
        pos := 0;
        RETURN NEXT;
        RETURN;
    END IF;
    IF v_max IS NOT NULL THEN
        SELECT coalesce(array_agg(t.partition_key), '{{}}'), coalesce(array_agg(v_max - t.n), '{{}}')
          INTO f_keys, f_free
          FROM (SELECT j.partition_key, count(*)::integer AS n FROM headgate_job j
                 WHERE j.state = 'running' AND j.queue = p_queue
                 GROUP BY j.partition_key) t;
    END IF;

    v_now_ms := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
    SELECT coalesce(array_agg(b.name ORDER BY b.name), '{{}}'),
           array_agg(b.burst ORDER BY b.name), array_agg(b.paused ORDER BY b.name),
           array_agg(headgate_refill(b.tokens, b.burst, b.limit_per_window, b.window_ms,
                                     v_now_ms - b.refilled_at_ms) ORDER BY b.name),
           array_agg(false)
      INTO b_names, b_burst, b_paused, b_tokens, b_spent
      FROM (SELECT * FROM headgate_rate_bucket ORDER BY name FOR UPDATE) b;

    SELECT f.quantum, f.credit_cap, f.turn, f.credit,
           coalesce((SELECT jsonb_object_agg(d.partition_key, d.deficit)
                       FROM headgate_partition_deficit d WHERE d.queue = f.queue), '{{}}')
      INTO v_quantum, v_cap, v_turn, v_credit, v_def
      FROM headgate_fairness f WHERE f.queue = p_queue;
    v_fair := FOUND;

    IF NOT v_fair THEN
        -- Claim order, pass after pass (``_Admission.run``).
        FOR v_pass IN 1..64 LOOP
            v_want := p_limit - cardinality(v_admitted);
            EXIT WHEN v_want <= 0;{_CLOSED}
            v_found := 0;
            FOR r IN
                SELECT j.id, j.ctid, j.partition_key, j.rate_class, j.weight FROM headgate_job j
                 WHERE {_WAITING.format(more=_BY_QUEUE + " AND NOT (j.partition_key = ANY(v_full))")}
                 ORDER BY {_ORDER} LIMIT v_want + 16
            LOOP
                v_found := v_found + 1;
                EXIT WHEN cardinality(v_admitted) >= p_limit;
                c_id := r.id; c_tid := r.ctid; c_part := r.partition_key;
                c_cls := r.rate_class; c_w := r.weight;{_CONSIDER}
                v_seen := v_seen || c_id;
            END LOOP;
            EXIT WHEN v_found = 0;
        END LOOP;
    ELSE
        -- The deficit round-robin (``kernel.fairness.Walk.run`` and ``_visit``).
        v_turn0 := v_turn; v_credit0 := v_credit;
        v_resume := v_turn IS NOT NULL AND v_credit > 0;
        v_key := coalesce(v_turn, ''); v_incl := v_resume OR v_turn IS NULL;
        LOOP{_NEXT_PARTITION}
            IF v_first THEN
                v_cur := CASE WHEN v_resume AND v_p = v_turn THEN v_credit END;
                v_first := false;
            END IF;
            EXIT WHEN v_p IS NULL OR v_total >= p_limit OR v_p = v_fruitless;
            IF v_p = ANY(v_full) THEN
                v_got := 0; v_ended := true;
            ELSE
                IF v_cur IS NULL THEN
                    v_cur := least(coalesce((v_def ->> v_p)::integer, 0), v_cap) + v_quantum;
                END IF;
                -- One visit: what is held over from this partition's last visit first.
                v_got := 0; v_passed := false; v_ended := NULL; v_fast := true; v_known := false;
                IF v_held ? v_p THEN
                    h_id := ARRAY(SELECT jsonb_array_elements_text(v_held -> v_p -> 0));
                    h_tid := ARRAY(SELECT e::tid FROM jsonb_array_elements_text(v_held -> v_p -> 1) e);
                    h_cls := ARRAY(SELECT e FROM jsonb_array_elements_text(v_held -> v_p -> 2) e);
                    h_w := ARRAY(SELECT e::integer FROM jsonb_array_elements_text(v_held -> v_p -> 3) e);
                ELSE
                    h_id := '{{}}';
                END IF;
                h_i := 1;
                v_want := p_limit - v_total;
                -- What this partition handed out earlier in the claim (only its own: the
                -- reads below test each row against it).
                IF v_pseen ? v_p THEN
                    v_seen := ARRAY(SELECT jsonb_array_elements_text(v_pseen -> v_p));
                ELSE
                    v_seen := '{{}}';
                END IF;
                WHILE v_got < v_want AND v_cur > 0 LOOP
                    IF h_i > cardinality(h_id) THEN{_CLOSED}
                        -- In claim order: the aggregates read the ordered subquery as is.
                        SELECT coalesce(array_agg(t.id), '{{}}'), array_agg(t.ctid),
                               array_agg(t.c), array_agg(t.w), {_PREFIX}
                          INTO h_id, h_tid, h_cls, h_w, v_k, v_s, v_cmin, v_cmax, v_cw
                          FROM (SELECT t.*, {_COST_SUM.format(order="t.priority DESC, t.scheduled_at, t.id")} AS s
                                  FROM (SELECT j.id, j.ctid, j.rate_class AS c, j.weight AS w,
                                               j.priority, j.scheduled_at
                                          FROM headgate_job j
                                         WHERE {_WAITING.format(more=" AND j.partition_key = v_p")}
                                         ORDER BY {_ORDER}
                                         LIMIT least(v_cur, v_want - v_got)) t) t;
                        h_i := 1;
                        v_known := true;
                        v_seen := v_seen || h_id;
                        IF cardinality(h_id) = 0 THEN
                            v_carry := CASE WHEN v_passed THEN v_cur ELSE 0 END;{_CARRY}
                            v_ended := true;
                            EXIT;
                        END IF;
                    END IF;{_AT_ONCE}
                    v_cost := greatest(1, least(h_w[h_i], v_quantum + v_cap));
                    IF v_cost > v_cur THEN
                        v_carry := v_cur;{_CARRY}
                        v_ended := true;
                        EXIT;
                    END IF;
                    c_id := h_id[h_i]; c_tid := h_tid[h_i]; c_part := v_p;
                    c_cls := h_cls[h_i]; c_w := h_w[h_i];
                    h_i := h_i + 1;{_CONSIDER}
                    IF v_verdict = 'admitted' THEN
                        v_cur := v_cur - v_cost;
                        v_got := v_got + 1;
                    ELSIF v_verdict = 'full' THEN
                        v_carry := v_cur;{_CARRY}
                        v_ended := true;
                        EXIT;
                    ELSE
                        v_passed := true;
                    END IF;
                END LOOP;
                IF v_ended IS NULL THEN
                    IF v_cur <= 0 THEN
                        v_carry := 0;{_CARRY}
                        v_cur := 0;
                        v_ended := true;
                    ELSE
                        v_ended := false;
                    END IF;
                END IF;
                IF cardinality(v_seen) > 0 THEN
                    v_pseen := v_pseen || jsonb_build_object(v_p, to_jsonb(v_seen));
                END IF;
                IF h_i <= cardinality(h_id) THEN
                    v_held := v_held || jsonb_build_object(v_p, jsonb_build_array(
                        to_jsonb(h_id[h_i:]), to_jsonb(h_tid[h_i:]::text[]),
                        to_jsonb(h_cls[h_i:]), to_jsonb(h_w[h_i:])));
                ELSIF v_held ? v_p THEN
                    v_held := v_held - v_p;
                END IF;
                v_total := v_total + v_got;
                v_turn := v_p;
                v_credit := CASE WHEN v_ended THEN 0 ELSE v_cur END;
            END IF;
            EXIT WHEN NOT v_ended;
            IF v_got > 0 THEN
                v_fruitless := NULL;
            ELSIF v_fruitless IS NULL THEN
                v_fruitless := v_p;
            END IF;
            v_key := v_p; v_incl := false; v_cur := NULL;
        END LOOP;
        IF v_turn IS DISTINCT FROM v_turn0 OR v_credit IS DISTINCT FROM v_credit0 THEN
            UPDATE headgate_fairness SET turn = v_turn, credit = v_credit WHERE queue = p_queue;
        END IF;
        IF cardinality(v_touched) > 0 THEN
            DELETE FROM headgate_partition_deficit
             WHERE queue = p_queue AND partition_key = ANY(v_touched);
            INSERT INTO headgate_partition_deficit (queue, partition_key, deficit)
            SELECT p_queue, t.k, (v_def ->> t.k)::integer
              FROM unnest(v_touched) AS t (k) WHERE v_def ? t.k;
        END IF;
    END IF;

    FOR v_bi IN 1..coalesce(cardinality(b_names), 0) LOOP
        IF b_spent[v_bi] THEN
            UPDATE headgate_rate_bucket SET tokens = b_tokens[v_bi], refilled_at_ms = v_now_ms
             WHERE name = b_names[v_bi];
        END IF;
    END LOOP;
    IF cardinality(v_admitted) = 0 THEN
        RETURN;
    END IF;
    -- Each leased row with its place in the order admitted (a join: looking each one up
    -- in the list would cost a claim of n jobs n² comparisons).
    RETURN QUERY
        WITH leased AS (
            UPDATE headgate_job AS j SET
                state = 'running', lease_id = p_lease_id, fence = j.fence + 1,
                claimed_by = p_worker, claimed_at = clock_timestamp(),
                lease_expires_at = clock_timestamp() + p_ttl_ms * interval '1 millisecond'
            WHERE j.ctid = ANY(v_tids)
            RETURNING {", ".join("j." + c for c, _ in _RETURNED)})
        SELECT a.n::integer, {", ".join("l." + c for c, _ in _RETURNED)}
          FROM leased l JOIN unnest(v_admitted) WITH ORDINALITY AS a (id, n)
            ON a.id COLLATE "C" = l.id;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    IF p_weighted AND v_n > 0 THEN
        UPDATE headgate_queue_state SET dispatched = dispatched + v_n WHERE name = p_queue;
    END IF;
    -- The levels of queues that ran dry, if this claim filled up: without waiting for a
    -- lock while holding this queue's (a claim holding one of theirs may be about to
    -- level this one), so when one is taken the caller writes them after the claim.
    IF v_n = p_limit AND cardinality(p_level_names) > 0
       AND (SELECT count(*) FROM (SELECT FROM headgate_queue_state q
                                   WHERE q.name = ANY(p_level_names)
                                   FOR UPDATE SKIP LOCKED) t) = cardinality(p_level_names) THEN
        UPDATE headgate_queue_state q SET dispatched = l.v
          FROM unnest(p_level_names, p_level_values) AS l (n, v)
         WHERE q.name = l.n AND q.dispatched < l.v;
        pos := -1;
        RETURN NEXT;
    END IF;
END
$$;
"""
DROP = """
DROP FUNCTION IF EXISTS headgate_claim_governed(
    varchar, integer, varchar[], varchar, varchar, bigint, boolean, varchar[], bigint[]);
DROP FUNCTION IF EXISTS headgate_spend_needed(integer, integer);
DROP FUNCTION IF EXISTS headgate_refill(double precision, integer, integer, bigint, bigint);
"""


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(REFILL)
        schema_editor.execute(CREATE)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("headgate_django", "0027_durable_children")]
    operations = [migrations.RunPython(create, drop)]
