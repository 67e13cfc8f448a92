import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * An orchestrator's stand-in on a free loopback port: each request's whole body read as text and handed to
 * `handle`; a throw in it is the stand-in's own fault, answered as the vendor would word a 500 (`fault`).
 */
export async function serveStandIn(handle: (req: IncomingMessage, res: ServerResponse, body: string) => void,
  fault: (res: ServerResponse, message: string) => void): Promise<{ url: string; close(): Promise<void> }> {
  const server = createServer((req, res) => {
    let text = '';
    req.on('data', (chunk: Buffer) => { text += chunk.toString(); });
    req.on('end', () => {
      try {
        handle(req, res, text);
      } catch (error) {
        fault(res, `stand-in fault: ${(error as Error).message}`);
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => new Promise((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
}
