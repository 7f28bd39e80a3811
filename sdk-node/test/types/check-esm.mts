import sdk, { Plugin, HostError, serve } from 'hearth-plugin';

class P extends Plugin {}
const s: typeof serve = sdk.serve;
const isHostError = (e: unknown): boolean => e instanceof HostError && e.code === 'NOT_FOUND';
void P; void s; void isHostError;
