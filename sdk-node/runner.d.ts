/**
 * Loads the plugin in `entryPath` (CommonJS, or ESM via dynamic import), finds the plugin
 * it exports and serves it; exits the process (0 ok, 1 stream failure or start() threw,
 * 2 entry unusable / invalid metadata / HEARTH_ADDR unset, 3 rejected by the broker).
 */
export declare function main(entryPath: string): Promise<never>;
