import { loadConfig, requireSlack } from './config.js';
import { migrate } from './db/migrate.js';
import { createPool, poolBounds } from './db/pool.js';
import { requireDatabase, requireRedis } from './db/reachable.js';
import { runService } from './processLifecycle.js';
import { createSlackApp } from './slack/app.js';

// npm start: the Slack app (HTTP on PORT, or Socket Mode with SLACK_APP_TOKEN) with the workers in-process.

runService(async () => {
  const config = loadConfig();
  const slack = requireSlack(config);
  await requireDatabase(config.DATABASE_URL, { create: false });
  await requireRedis(config.REDIS_URL);
  const pool = createPool(config.DATABASE_URL, 'backfill-bot', poolBounds(config));
  await migrate(pool);
  const bot = await createSlackApp({ ctx: { pool, config }, slack });
  await bot.start(config.PORT);
  console.log(slack.appToken ? 'backfill-bot connected over Socket Mode' : `backfill-bot listening on :${config.PORT} (POST /slack/events, GET /healthz)`);
  return async () => {
    await bot.stop();
    await pool.end();
  };
});
