import { openBackends } from './backends.js';
import { loadConfig, requireSlack } from './config.js';
import { migrate } from './db/migrate.js';
import { createPool, poolBounds } from './db/pool.js';
import { runService, startOn } from './processLifecycle.js';
import { createSlackApp } from './slack/app.js';

// npm start: the Slack app (HTTP on PORT, or Socket Mode with SLACK_APP_TOKEN) with the workers in-process.

runService(async () => {
  const loaded = loadConfig();
  const slack = requireSlack(loaded);
  const backends = await openBackends(loaded, { log: (line) => console.log(line) });
  return startOn(backends, async (config) => {
    const pool = createPool(config.DATABASE_URL, 'backfill-bot', poolBounds(config));
    try {
      await migrate(pool);
      const bot = await createSlackApp({ ctx: { pool, config }, slack });
      await bot.start(config.PORT);
      console.log(backends.summary);
      console.log(slack.appToken ? 'backfill-bot connected over Socket Mode' : `backfill-bot listening on :${config.PORT} (POST /slack/events, GET /healthz)`);
      return async () => {
        await bot.stop();
        await pool.end();
      };
    } catch (error) {
      await pool.end();
      throw error;
    }
  });
});
