-- The names people go by, so that a terminal and the incident package can say "Settlement lead" where Slack
-- would render <@U07SETTLE>. Learned from Slack whenever someone uses the bot (a slash command carries the
-- user's name, a button press too), and seeded for the demo; nothing else depends on it: a person the bot has
-- not met yet is shown by their id.
CREATE TABLE backfill.people (
  slack_id    text PRIMARY KEY CHECK (slack_id ~ '^[UW][A-Z0-9]+$'),
  name        text NOT NULL CHECK (length(btrim(name)) > 0),
  updated_at  timestamptz NOT NULL DEFAULT now()
);
