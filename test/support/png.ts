import { inflateSync } from 'node:zlib';

// A PNG reader for the tests, on node:zlib alone: enough of the format for what resvg writes (8-bit RGB or
// RGBA, not interlaced), so a test can check a chart's size and look at its pixels as a viewer would.

export interface DecodedPng {
  width: number;
  height: number;
  /** [r, g, b, a] at (x, y), 0-255. */
  pixel(x: number, y: number): [number, number, number, number];
}

const SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

/** The Paeth predictor of the PNG specification (filter type 4). */
function paeth(a: number, b: number, c: number): number {
  const p = a + b - c;
  const pa = Math.abs(p - a);
  const pb = Math.abs(p - b);
  const pc = Math.abs(p - c);
  if (pa <= pb && pa <= pc) return a;
  return pb <= pc ? b : c;
}

function unfilter(data: Buffer, width: number, height: number, channels: number): Buffer {
  const stride = width * channels;
  const out = Buffer.alloc(stride * height);
  for (let y = 0; y < height; y += 1) {
    const filter = data[y * (stride + 1)];
    const line = data.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1));
    for (let i = 0; i < stride; i += 1) {
      const left = i >= channels ? (out[y * stride + i - channels] ?? 0) : 0;
      const up = y > 0 ? (out[(y - 1) * stride + i] ?? 0) : 0;
      const upLeft = y > 0 && i >= channels ? (out[(y - 1) * stride + i - channels] ?? 0) : 0;
      const raw = line[i] ?? 0;
      const predicted = [0, left, up, (left + up) >> 1, paeth(left, up, upLeft)][filter ?? 0];
      if (predicted === undefined) throw new Error(`unknown PNG filter ${String(filter)} on row ${y}`);
      out[y * stride + i] = (raw + predicted) & 0xff;
    }
  }
  return out;
}

export function decodePng(bytes: Buffer): DecodedPng {
  if (!bytes.subarray(0, 8).equals(SIGNATURE)) throw new Error('not a PNG: the signature is wrong');
  let offset = 8;
  let header: { width: number; height: number; bitDepth: number; colourType: number; interlace: number } | undefined;
  const idat: Buffer[] = [];
  while (offset < bytes.length) {
    const length = bytes.readUInt32BE(offset);
    const type = bytes.toString('latin1', offset + 4, offset + 8);
    const body = bytes.subarray(offset + 8, offset + 8 + length);
    if (type === 'IHDR') {
      header = { width: body.readUInt32BE(0), height: body.readUInt32BE(4), bitDepth: body[8] ?? 0, colourType: body[9] ?? 0, interlace: body[12] ?? 0 };
    } else if (type === 'IDAT') {
      idat.push(body);
    } else if (type === 'IEND') {
      break;
    }
    offset += 12 + length;
  }
  if (!header) throw new Error('not a PNG: no IHDR chunk');
  const channels = header.colourType === 6 ? 4 : header.colourType === 2 ? 3 : 0;
  if (header.bitDepth !== 8 || channels === 0 || header.interlace !== 0) {
    throw new Error(`a PNG this reader does not handle: bit depth ${header.bitDepth}, colour type ${header.colourType}, interlace ${header.interlace}`);
  }
  const { width, height } = header;
  const pixels = unfilter(inflateSync(Buffer.concat(idat)), width, height, channels);
  return {
    width,
    height,
    pixel(x, y) {
      if (x < 0 || y < 0 || x >= width || y >= height) throw new Error(`(${x}, ${y}) is outside the ${width}×${height} image`);
      const at = (Math.floor(y) * width + Math.floor(x)) * channels;
      return [pixels[at] ?? 0, pixels[at + 1] ?? 0, pixels[at + 2] ?? 0, channels === 4 ? (pixels[at + 3] ?? 0) : 255];
    },
  };
}
