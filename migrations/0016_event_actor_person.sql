-- One person on both front ends. A CLI user that BACKFILL_CLI_OPERATORS maps to a Slack id (dana=U07DANA) is
-- still recorded as the CLI actor (cli:dana@ops-1), so the timeline says the action came from the CLI; this
-- column keeps the Slack id of the person beside it, so that who holds a backfill and who asked for it (the
-- two-operator rule) are compared on the person, whichever front end they used. NULL: the actor is the person
-- (a Slack user), or a CLI user with no Slack id.
ALTER TABLE backfill.events ADD COLUMN actor_person text;
