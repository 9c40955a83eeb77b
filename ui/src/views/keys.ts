// SSH keys: the pairs machines trust, how many machines got each, and a
// private-key download behind a step-up (a code, or the password).
import { unwrap, type Message, type SSHKey, type StepUpState } from '../api';
import { usePasskey } from '../passkey';
import type { Ctx } from '../ctx';
import { ask } from '../dialog';
import { badge, busy, card, checkbox, field, form, h, notice, refill, rowButton, saveFile, table } from '../dom';

export function sshKeys(ctx: Ctx): HTMLElement {
  const api = ctx.api;
  const body = h('div', null, h('p', { class: 'muted' }, 'Loading…'));
  const n = notice();
  const download = async (k: SSHKey) => {
    const info = await api.get<{ requires: string }>('/api/local/ssh-keys/challenge-info');
    const totp = info.requires === 'totp';
    const st = totp ? await api.get<StepUpState>('/api/auth/step-up') : null;
    const fetchKey = async (challenge: unknown) => {
      const res = await api.send('POST', `/api/local/ssh-keys/${encodeURIComponent(k.id)}/download`, challenge);
      if (!res.ok) await unwrap(res); // throws the server's message
      saveFile('tunnel_id_rsa', await res.text(), 'application/octet-stream');
      n.ok(`Downloaded the private key of ${k.name} as tunnel_id_rsa. Keep it private.`);
    };
    await ask({
      title: `Download the private key of ${k.name}`,
      body: h('p', null, 'Anyone with this file can log in where the key is trusted. Confirm it is you.'),
      confirm: 'Download private key',
      code: totp ? { label: 'Code from your authenticator app' } : { label: 'Your login password', secret: true },
      action: (secret) => fetchKey(totp ? { code: secret } : { password: secret }),
      alt: st?.passkey ? { label: 'Use a passkey', action: async () => {
        const p = await usePasskey(api, '/api/auth/step-up/passkey');
        await fetchKey({ ceremony: p.ceremony, passkey: p.credential });
      } } : undefined,
    });
  };
  const load = () => busy([], n, async () => {
    const keys = (await api.get<SSHKey[]>('/api/local/ssh-keys')) ?? [];
    refill(body, table(['Name', 'Fingerprint', 'Used by', ''], keys.map((k) => {
      const dl = rowButton('Download', k.name, (b) => void busy(b, n, () => download(k)));
      const def = k.is_default ? null : rowButton('Make default', k.name, (b) => void busy(b, n, async () => {
        await api.put<Message>(`/api/local/ssh-keys/${encodeURIComponent(k.id)}/default`);
        await load();
      }));
      const used = k.machine_count ?? 0;
      // The default key is what joining machines get: it is not offered
      // for deletion (make another one the default first).
      const del = k.is_default ? null : rowButton('Delete', k.name, () => void ask({
        title: `Delete the key ${k.name}?`,
        body: h('p', null, used ? `${used === 1 ? '1 machine trusts' : `${used} machines trust`} this key; you can no longer log in to ${used === 1 ? 'it' : 'them'} with it.` : 'No machine was given this key.'),
        confirm: `Delete ${k.name}`, danger: true,
        action: async () => {
          await api.del<Message>(`/api/local/ssh-keys/${encodeURIComponent(k.id)}`);
          await load();
        },
      }), 'danger small');
      return [h('span', null, k.name, k.is_default ? [' ', badge('default', 'good')] : null),
        h('code', { class: 'fp' }, k.fingerprint ?? '—'), `${used} machine${used === 1 ? '' : 's'}`, h('div', { class: 'row-actions' }, dl, def, del)];
    }), 'No SSH keys yet.', 'SSH keys'));
  });
  const name = field('Name', { type: 'text', name: 'name', placeholder: 'Unnamed key', autocomplete: 'off', maxlength: 64 });
  const setDef = checkbox('Make it the default key');
  const gen = form({ label: 'Generate an SSH key', submit: 'Generate key' }, [name.row, setDef.row], async (fn) => {
    const k = await api.post<SSHKey>('/api/local/ssh-keys/generate', { name: name.input.value.trim(), set_default: setDef.input.checked });
    fn.ok(`Generated ${k.name}.`);
    name.input.value = '';
    await load();
  });
  ctx.sub(['machines'], () => void load());
  void load();
  return card('Key pairs', h('p', null, 'Machines trust the default key when they join; "used by" counts the machines that got each key. ',
    'To log in to a machine, download the private key it trusts and give it to ssh with ', h('code', null, '-i'), '.'),
    n.el, body, h('h3', null, 'New key'), gen.form);
}
