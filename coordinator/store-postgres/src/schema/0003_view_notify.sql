-- Replicas cache each host's check-in view (store-postgres/src/view_cache.rs). Every change to a
-- row such a view reads sends that row's host id on the channel `drover_view`, delivered when
-- (and only if) its transaction commits, so every replica drops what it cached of that host —
-- whoever made the change. Identical notifications of one transaction arrive once.
--
-- A host's check-in fields (last_checkin_at, agent_version, boot_id, current_generation) are
-- not watched: routine check-ins rewrite them in batches, and no cached view is read for them.

CREATE FUNCTION drover_view_host_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        PERFORM pg_notify('drover_view', OLD.id);
    END IF;
    IF TG_OP <> 'DELETE' THEN
        PERFORM pg_notify('drover_view', NEW.id);
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION drover_view_row_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        PERFORM pg_notify('drover_view', OLD.host_id);
    END IF;
    IF TG_OP <> 'DELETE' THEN
        PERFORM pg_notify('drover_view', NEW.host_id);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER hosts_view_changed
    AFTER INSERT OR DELETE OR UPDATE OF id, hostname, state, schedulable, created_at, updated_at ON hosts
    FOR EACH ROW EXECUTE FUNCTION drover_view_host_changed();
CREATE TRIGGER intents_view_changed
    AFTER INSERT OR UPDATE OR DELETE ON intents
    FOR EACH ROW EXECUTE FUNCTION drover_view_row_changed();
CREATE TRIGGER tasks_view_changed
    AFTER INSERT OR UPDATE OR DELETE ON tasks
    FOR EACH ROW EXECUTE FUNCTION drover_view_row_changed();
CREATE TRIGGER host_reports_view_changed
    AFTER INSERT OR UPDATE OR DELETE ON host_reports
    FOR EACH ROW EXECUTE FUNCTION drover_view_row_changed();
