-- Who acted, and for whom. An event's actor is whoever did it: a Slack user, or the CLI's OS user and host
-- (cli:<user>@<host>). When that actor used someone else's rights (the CLI's --as: an operator acknowledging
-- for an owner who cannot, say), the event names that person and the reason given; the gate, the signatures
-- and the two-operator rule still count the person acted for.
ALTER TABLE backfill.events
  ADD COLUMN on_behalf_of text,
  ADD COLUMN on_behalf_reason text,
  ADD CONSTRAINT events_on_behalf_has_reason CHECK (on_behalf_of IS NULL OR length(btrim(on_behalf_reason)) > 0);
