// Passkeys in the browser: the daemon's WebAuthn options (JSON) go to
// navigator.credentials and the answer goes back as JSON.
import type { Api } from './api';

interface Begin { ceremony: string; options: { publicKey: unknown } }

type PKC = {
  parseCreationOptionsFromJSON(o: unknown): PublicKeyCredentialCreationOptions;
  parseRequestOptionsFromJSON(o: unknown): PublicKeyCredentialRequestOptions;
};

function pkc(): PKC {
  const p = (globalThis as unknown as { PublicKeyCredential?: Partial<PKC> }).PublicKeyCredential;
  if (!p?.parseCreationOptionsFromJSON || !p.parseRequestOptionsFromJSON) {
    throw new Error('This browser cannot use passkeys here (WebAuthn needs https, or a newer browser).');
  }
  return p as PKC;
}

/** The browser's words for a prompt that did not end in a passkey. */
function said(e: unknown): Error {
  if (e instanceof DOMException && (e.name === 'NotAllowedError' || e.name === 'AbortError')) {
    return new Error('The passkey prompt was cancelled or timed out.');
  }
  if (e instanceof DOMException && e.name === 'InvalidStateError') {
    return new Error('This passkey is already registered here.');
  }
  return e instanceof Error ? e : new Error(String(e));
}

const json = (c: Credential | null) => (c as unknown as { toJSON(): unknown }).toJSON();

/** Registers a passkey named name; returns the daemon's answer. */
export async function addPasskey<T>(api: Api, name: string): Promise<T> {
  const b = await api.post<Begin>('/api/auth/passkeys/register/begin');
  let credential: unknown;
  try {
    credential = json(await navigator.credentials.create({ publicKey: pkc().parseCreationOptionsFromJSON(b.options.publicKey) }));
  } catch (e) {
    throw said(e);
  }
  return api.post<T>('/api/auth/passkeys/register/finish', { ceremony: b.ceremony, name, credential });
}

/** Answers a passkey prompt begun at path (with body); returns the
 * ceremony and the browser's answer, for the finishing request. */
export async function usePasskey(api: Api, path: string, body?: unknown): Promise<{ ceremony: string; credential: unknown }> {
  const b = await api.post<Begin>(path, body);
  try {
    const credential = json(await navigator.credentials.get({ publicKey: pkc().parseRequestOptionsFromJSON(b.options.publicKey) }));
    return { ceremony: b.ceremony, credential };
  } catch (e) {
    throw said(e);
  }
}
