import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { CustomRoute } from '@slack/bolt';
import type { Logger } from '../log.js';

// GET /metrics: Prometheus' text format, beside /slack/events on the Bolt receiver (`npm start`), or on a small
// server of its own (`npm run worker` with METRICS_PORT). This module is the HTTP edge only: what is measured is
// src/metrics.ts. Unauthenticated, as Prometheus scrapes are: the figures are counts, never names or rows.

/** What the route serves: an app's metrics (src/metrics.ts). */
export interface MetricsSource {
  exposition(): Promise<{ contentType: string; body: string }>;
}

function handler(metrics: MetricsSource, log: Logger | undefined) {
  return (_req: IncomingMessage, res: ServerResponse) => {
    metrics.exposition().then(({ contentType, body }) => {
      res.writeHead(200, { 'content-type': contentType });
      res.end(body);
    }, (error: unknown) => {
      log?.error({ err: error }, 'GET /metrics failed');
      res.writeHead(500, { 'content-type': 'text/plain' });
      res.end('metrics unavailable; the error is in the log');
    });
  };
}

/** The Bolt custom route. */
export function metricsRoute(metrics: MetricsSource, log?: Logger): CustomRoute {
  return { path: '/metrics', method: ['GET'], handler: handler(metrics, log) };
}

/** A server of its own for GET /metrics (anything else: 404), listening on `port` (0: a free one). */
export async function serveMetrics(metrics: MetricsSource, port: number, log?: Logger): Promise<{ server: Server; port: number; close(): Promise<void> }> {
  const serve = handler(metrics, log);
  const server = createServer((req, res) => {
    if (req.method === 'GET' && (req.url ?? '').split('?')[0] === '/metrics') {
      serve(req, res);
      return;
    }
    res.writeHead(404, { 'content-type': 'text/plain' });
    res.end('not found: GET /metrics');
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, () => resolve());
  });
  return {
    server,
    port: (server.address() as AddressInfo).port,
    close: () => new Promise<void>((resolve) => {
      server.close(() => resolve());
      // A scraper's kept-alive connection would hold the close open until it times out.
      server.closeIdleConnections();
    }),
  };
}
