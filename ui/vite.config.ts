import { defineConfig } from 'vite';

// The daemon embeds ui/dist; assets get content hashes so it can cache
// them forever. public/.keep is copied so ui/dist/.keep (committed, for
// go:embed) survives Vite's emptying of the output directory.
// `npm run dev` proxies /api (and the log WebSocket) to a running daemon,
// by default `make run`'s 127.0.0.1:7380; TUNNELSVC_URL overrides it.
const target = process.env.TUNNELSVC_URL ?? 'http://127.0.0.1:7380';

export default defineConfig({
  base: '/',
  build: {
    outDir: 'dist',
    assetsDir: 'assets',
    emptyOutDir: true,
    sourcemap: false,
  },
  server: {
    proxy: {
      '/api': { target, ws: true },
    },
  },
});
