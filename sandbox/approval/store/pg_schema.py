"""The PostgreSQL approval store's schema: its numbered migrations (`MIGRATIONS`) and the
version they lead to (`SCHEMA_VERSION`). Moved out of store/postgres.py as they were."""

from __future__ import annotations

from sandbox.approval.store.sql_rules import RULE_COLUMNS

#: Numbered schema migrations: MIGRATIONS[n - 1] takes a schema from version n-1 to n.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (  # 1: calls, requests, answers, the journal (by trigger), rules, leases, meta
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        """CREATE TABLE calls (
            call_id TEXT PRIMARY KEY, tool TEXT NOT NULL, digest TEXT NOT NULL,
            args TEXT NOT NULL, state TEXT NOT NULL, request_id TEXT, grant_digest TEXT,
            run_args TEXT, owner TEXT, result TEXT, session_id TEXT,
            created DOUBLE PRECISION NOT NULL, updated DOUBLE PRECISION NOT NULL,
            note TEXT)""",
        "CREATE INDEX calls_by_state ON calls(state, updated)",
        """CREATE TABLE requests (
            id TEXT PRIMARY KEY, call_id TEXT NOT NULL, tool TEXT NOT NULL,
            args TEXT NOT NULL, digest TEXT NOT NULL, hint TEXT NOT NULL, payload TEXT,
            kind TEXT NOT NULL, details TEXT, status TEXT NOT NULL,
            created DOUBLE PRECISION NOT NULL, expires DOUBLE PRECISION,
            decided DOUBLE PRECISION, outcome TEXT, reason TEXT, decided_by TEXT,
            channel TEXT, decision TEXT, edited_from TEXT, session_id TEXT)""",
        "CREATE INDEX requests_by_status ON requests(status, created, id)",
        "CREATE INDEX requests_by_call ON requests(call_id)",
        """CREATE TABLE answers (
            request_id TEXT PRIMARY KEY, decision TEXT NOT NULL, decided_by TEXT,
            channel TEXT, at DOUBLE PRECISION NOT NULL)""",
        """CREATE TABLE journal (
            seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, call_id TEXT NOT NULL,
            state TEXT NOT NULL, at DOUBLE PRECISION NOT NULL, owner TEXT, detail TEXT)""",
        "CREATE INDEX journal_by_call ON journal(call_id, seq)",
        """CREATE TABLE rules (
            id TEXT PRIMARY KEY, tool TEXT NOT NULL, kind TEXT NOT NULL, words TEXT,
            prefix INTEGER NOT NULL DEFAULT 0, args TEXT, digest TEXT, scope TEXT NOT NULL,
            session_id TEXT, created DOUBLE PRECISION NOT NULL,
            expires DOUBLE PRECISION NOT NULL, created_by TEXT, channel TEXT,
            request_id TEXT, revoked DOUBLE PRECISION, revoked_by TEXT,
            uses INTEGER NOT NULL DEFAULT 0, last_used DOUBLE PRECISION)""",
        "CREATE INDEX rules_by_tool ON rules(tool, revoked, expires)",
        """CREATE TABLE leases (
            worker TEXT PRIMARY KEY, host TEXT NOT NULL,
            expires DOUBLE PRECISION NOT NULL)""",
        # Every statement that sets calls.state also sets updated and note (the journal's
        # detail of this transition), as in SQLite.
        """CREATE FUNCTION calls_journal() RETURNS trigger LANGUAGE plpgsql
            SET search_path FROM CURRENT AS $$
            BEGIN
                INSERT INTO journal(call_id, state, at, owner, detail)
                VALUES (NEW.call_id, NEW.state, NEW.updated, NEW.owner, NEW.note);
                RETURN NULL;
            END $$""",
        "CREATE TRIGGER calls_journal_new AFTER INSERT ON calls "
        "FOR EACH ROW EXECUTE FUNCTION calls_journal()",
        "CREATE TRIGGER calls_journal_state AFTER UPDATE OF state ON calls "
        "FOR EACH ROW EXECUTE FUNCTION calls_journal()",
    ),
    (  # 2: the gate's steps as server-side functions: one round trip each
        # sandbox_park: `SQLApprovalStore.park`'s transaction (advisory lock, the bounds,
        # the guarded update, the request) in one statement. code 0: parked (has_rules:
        # whether any rule of this tool is active); 1: max_pending reached (n: pending);
        # 2: the call is not in progress here; 3: the session's cap reached (n: its
        # pending); 9: p_try and the lock is taken (not waited for). Nothing is written
        # unless code is 0.
        """CREATE FUNCTION sandbox_park(
            p_lock INTEGER, p_key INTEGER, p_try BOOLEAN, p_parkable TEXT[], p_max BIGINT,
            p_max_session BIGINT, p_owner TEXT, p_rid TEXT, p_call TEXT, p_tool TEXT,
            p_args TEXT, p_digest TEXT, p_hint TEXT, p_payload TEXT, p_kind TEXT,
            p_details TEXT, p_now DOUBLE PRECISION, p_expires DOUBLE PRECISION,
            p_edited_from TEXT, p_session TEXT,
            OUT code INTEGER, OUT n BIGINT, OUT has_rules BOOLEAN)
            LANGUAGE plpgsql SET search_path FROM CURRENT
            SET plan_cache_mode = force_generic_plan AS $$
            DECLARE
                total BIGINT;
                mine BIGINT := 0;
            BEGIN
                IF NOT p_try THEN
                    PERFORM pg_advisory_xact_lock(p_lock, p_key);
                ELSIF NOT pg_try_advisory_xact_lock(p_lock, p_key) THEN
                    code := 9; RETURN;
                END IF;
                SELECT COUNT(*) INTO total FROM requests WHERE status = 'pending';
                IF total >= p_max THEN
                    code := 1; n := total; RETURN;
                END IF;
                IF p_session IS NOT NULL AND p_max_session IS NOT NULL THEN
                    SELECT COUNT(*) INTO mine FROM requests
                        WHERE status = 'pending' AND session_id = p_session;
                END IF;
                IF p_max_session IS NOT NULL AND mine >= p_max_session THEN
                    PERFORM 1 FROM calls WHERE call_id = p_call
                        AND state = ANY(p_parkable) AND owner = p_owner;
                    code := CASE WHEN FOUND THEN 3 ELSE 2 END; n := mine; RETURN;
                END IF;
                UPDATE calls SET state = 'awaiting', request_id = p_rid, owner = p_owner,
                    updated = p_now, note = p_rid
                    WHERE call_id = p_call AND state = ANY(p_parkable) AND owner = p_owner;
                IF NOT FOUND THEN
                    code := 2; n := total; RETURN;
                END IF;
                INSERT INTO requests(id, call_id, tool, args, digest, hint, payload, kind,
                    details, status, created, expires, edited_from, session_id)
                    VALUES (p_rid, p_call, p_tool, p_args, p_digest, p_hint, p_payload,
                            p_kind, p_details, 'pending', p_now, p_expires, p_edited_from,
                            p_session);
                has_rules := EXISTS (SELECT 1 FROM rules WHERE tool = p_tool
                    AND revoked IS NULL AND expires > p_now);
                code := 0; n := total;
            END $$""",
        # sandbox_decide: the common case of `SQLApprovalStore.decide` in one statement
        # (advisory lock; a pending, unexpired request with no human answer waiting when
        # this decision is a human's; its call moved, the answer notified, the grant
        # claimed when p_start; with p_expect, only while every column of the request
        # still holds the e_ values the decision was judged on). code 0: recorded; 1: not
        # the common case, nothing written (the caller runs the general transaction);
        # 9: p_try and the lock is taken (not waited for), nothing written. A claim that
        # fails raises SQLSTATE SB001: the whole statement, decision too, is rolled back.
        """CREATE FUNCTION sandbox_decide(
            p_lock INTEGER, p_key INTEGER, p_try BOOLEAN, p_rid TEXT, p_status TEXT,
            p_now DOUBLE PRECISION, p_outcome TEXT, p_reason TEXT, p_decided_by TEXT,
            p_channel TEXT, p_decision TEXT, p_human BOOLEAN, p_notify TEXT,
            p_call_state TEXT, p_grant BOOLEAN, p_owner TEXT, p_result TEXT, p_note TEXT,
            p_start BOOLEAN, p_expect BOOLEAN, e_call TEXT, e_tool TEXT, e_args TEXT,
            e_digest TEXT, e_hint TEXT, e_payload TEXT, e_kind TEXT, e_details TEXT,
            e_created DOUBLE PRECISION, e_expires DOUBLE PRECISION, e_edited_from TEXT,
            e_session TEXT,
            OUT code INTEGER, OUT r_call TEXT, OUT r_digest TEXT)
            LANGUAGE plpgsql SET search_path FROM CURRENT
            SET plan_cache_mode = force_generic_plan AS $$
            BEGIN
                IF NOT p_try THEN
                    PERFORM pg_advisory_xact_lock(p_lock, p_key);
                ELSIF NOT pg_try_advisory_xact_lock(p_lock, p_key) THEN
                    code := 9; RETURN;
                END IF;
                UPDATE requests SET status = p_status, decided = p_now, outcome = p_outcome,
                    reason = p_reason, decided_by = p_decided_by, channel = p_channel,
                    decision = p_decision
                    WHERE id = p_rid AND status = 'pending'
                    AND (expires IS NULL OR p_now <= expires)
                    AND NOT (p_human AND EXISTS (SELECT 1 FROM answers
                                                 WHERE request_id = p_rid))
                    AND (NOT p_expect OR (call_id = e_call AND tool = e_tool
                        AND args = e_args AND digest = e_digest AND hint = e_hint
                        AND payload IS NOT DISTINCT FROM e_payload AND kind = e_kind
                        AND details IS NOT DISTINCT FROM e_details AND created = e_created
                        AND expires IS NOT DISTINCT FROM e_expires
                        AND edited_from IS NOT DISTINCT FROM e_edited_from
                        AND session_id IS NOT DISTINCT FROM e_session))
                    RETURNING requests.call_id, requests.digest INTO r_call, r_digest;
                IF NOT FOUND THEN
                    code := 1; RETURN;
                END IF;
                PERFORM pg_notify(p_notify, p_rid);
                UPDATE calls SET state = p_call_state,
                    grant_digest = CASE WHEN p_grant THEN r_digest END, owner = p_owner,
                    result = p_result, updated = p_now, note = p_note
                    WHERE call_id = r_call AND state = 'awaiting' AND request_id = p_rid;
                IF p_start THEN
                    UPDATE calls SET state = 'started', owner = p_owner, grant_digest = NULL,
                        updated = p_now, note = r_digest
                        WHERE call_id = r_call AND ((state = 'approved' AND grant_digest = r_digest)
                            OR (state = 'new' AND calls.digest = r_digest AND owner = p_owner));
                    IF NOT FOUND THEN
                        RAISE EXCEPTION 'call % of confirmation % is no longer waiting for it',
                            r_call, p_rid
                            USING ERRCODE = 'SB001';
                    END IF;
                END IF;
                code := 0;
            END $$""",
        # sandbox_open_park: `open_call`'s insert, then sandbox_park. code 4: the call id
        # is known already, nothing written (the caller opens it the general way); 9:
        # p_try and the lock is taken, nothing written (the lock is tried first).
        """CREATE FUNCTION sandbox_open_park(
            p_lock INTEGER, p_key INTEGER, p_try BOOLEAN, p_parkable TEXT[], p_max BIGINT,
            p_max_session BIGINT, p_owner TEXT, p_rid TEXT, p_call TEXT, p_tool TEXT,
            p_args TEXT, p_digest TEXT, p_hint TEXT, p_payload TEXT, p_kind TEXT,
            p_details TEXT, p_now DOUBLE PRECISION, p_expires DOUBLE PRECISION,
            p_edited_from TEXT, p_session TEXT,
            OUT code INTEGER, OUT n BIGINT, OUT has_rules BOOLEAN)
            LANGUAGE plpgsql SET search_path FROM CURRENT
            SET plan_cache_mode = force_generic_plan AS $$
            BEGIN
                IF p_try AND NOT pg_try_advisory_xact_lock(p_lock, p_key) THEN
                    code := 9; RETURN;
                END IF;
                INSERT INTO calls(call_id, tool, digest, args, state, owner, session_id,
                                  created, updated)
                    VALUES (p_call, p_tool, p_digest, p_args, 'new', p_owner, p_session,
                            p_now, p_now)
                    ON CONFLICT DO NOTHING;
                IF NOT FOUND THEN
                    code := 4; RETURN;
                END IF;
                SELECT p.code, p.n, p.has_rules INTO code, n, has_rules
                    FROM sandbox_park(p_lock, p_key, FALSE, p_parkable, p_max, p_max_session,
                                      p_owner, p_rid, p_call, p_tool, p_args, p_digest,
                                      p_hint, p_payload, p_kind, p_details, p_now,
                                      p_expires, p_edited_from, p_session) p;
            END $$""",
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)

assert RULE_COLUMNS.count(",") == 17  # the rules table above has these 18 columns
