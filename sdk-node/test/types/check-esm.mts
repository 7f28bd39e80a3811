import sdk, { Plugin, serve } from 'hearth-sdk';

class P extends Plugin {}
const s: typeof serve = sdk.serve;
void P; void s;
