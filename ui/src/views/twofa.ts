// Two-factor authentication: devices, enrolment, backup codes (copy and
// download), and turning it off. Codes are typed in plain one-time-code
// fields (number pad on phones), never masked like a password.
import type { AuthStatus, Enrollment, Message, TwoFAStatus } from '../api';
import type { Ctx } from '../ctx';
import { ask } from '../dialog';
import { dismiss, getSecret, keep } from '../secrets';
import { addPasskey } from '../passkey';
import { badge, busy, card, checkbox, clear, codeField, copyBox, copyText, field, form, h, notice, refill, rowButton, saveFile, table, time } from '../dom';

// Turning 2FA off or issuing new backup codes takes a code from any
// device; removing a device, one from another device (or a backup code).
const CODE = { label: 'Code from your authenticator app, or a backup code', hint: 'Six digits from the app, or a backup code.', backup: true };
const otherCode = (others: number) => (others > 0
  ? { label: 'Code from another device, or a backup code', hint: 'Six digits from another device\'s app, or a backup code.', backup: true }
  : { label: 'A backup code', hint: 'This is your only device, so only a backup code can confirm it.', backup: true });

function backupCodesBox(codes: string[]): HTMLElement {
  const list = h('ul', { class: 'codes' }, codes.map((c) => h('li', null, c)));
  const text = `tunnelsvc backup codes (each works once)\n\n${codes.join('\n')}\n`;
  const said = h('span', { class: 'muted', role: 'status' });
  const copy = h('button', { type: 'button', class: 'secondary' }, 'Copy codes');
  copy.addEventListener('click', async () => {
    said.textContent = (await copyText(text, list)) ? 'Copied.' : 'Selected; press Ctrl+C to copy.';
  });
  const dl = h('button', { type: 'button', class: 'secondary' }, 'Download codes');
  dl.addEventListener('click', () => saveFile('tunnelsvc-backup-codes.txt', text));
  const done = h('button', { type: 'button', class: 'secondary' }, 'I have saved them');
  const box = h('div', { class: 'callout' },
    h('p', null, h('strong', null, 'Backup codes — shown only now.'), ' Each works once when you have no device. Store them somewhere safe.'),
    list, h('div', { class: 'actions' }, copy, dl, done, said));
  // Kept until dismissed, so leaving the page does not lose them.
  keep({ key: 'backup-codes', route: 'security/2fa', what: 'your new backup codes', data: { codes } });
  done.addEventListener('click', () => { dismiss('backup-codes'); box.remove(); });
  return box;
}

export function twoFA(ctx: Ctx): HTMLElement {
  const api = ctx.api;
  const body = h('div', null, h('p', { class: 'muted' }, 'Loading…'));
  const extra = h('div');
  const codesBox = h('div');
  const n = notice();
  const load = () => busy([], n, async () => {
    const s = await api.get<TwoFAStatus>('/api/auth/2fa/status');
    const devices = table(['Device', 'Kind', 'Added', 'Last used', ''], (s.devices ?? []).map((d) => {
      const rm = rowButton('Remove', d.name, () => void ask({
        title: `Remove ${d.name}?`,
        body: h('p', null, `Codes from ${d.name} stop working.`, (s.devices ?? []).length > 1
          ? ' Confirm with a code from another device or a backup code.'
          : ' It is your only device: removing it turns two-factor authentication off. Confirm with a backup code.'),
        confirm: `Remove ${d.name}`, danger: true, code: otherCode((s.devices ?? []).length - 1),
        action: async (code) => {
          n.ok((await api.del<Message>(`/api/auth/2fa/devices/${encodeURIComponent(d.id)}`, { code })).message);
          await load();
        },
      }), 'danger small');
      return [d.name, d.type === 'passkey' ? 'Passkey' : 'Authenticator app', time(d.created_at), time(d.last_used_at), rm];
    }), 'No devices.', 'Devices');
    const enroll = h('button', { type: 'button' }, s.enabled ? 'Add another device' : 'Turn on two-factor authentication');
    enroll.addEventListener('click', () => void busy(enroll, n, async () => {
      const e = await api.post<Enrollment>('/api/auth/2fa/enroll');
      const code = codeField('Code from the app', 'The six digits the app shows for the new entry.');
      const name = field('Device name', { type: 'text', name: 'name', placeholder: 'Authenticator', maxlength: 64 });
      const confirm = form({ label: 'Confirm the new device', submit: 'Confirm' }, [code.row, name.row], async (cn) => {
        const r = await api.post<Message & { backup_codes?: string[] }>('/api/auth/2fa/confirm', { code: code.input.value.trim(), name: name.input.value.trim() });
        clear(extra);
        clear(codesBox, r.backup_codes?.length ? backupCodesBox(r.backup_codes) : null);
        cn.ok(r.message);
        n.ok(r.message || 'Device added.');
        await load();
      });
      // Cancel drops the unconfirmed secret from the page (the daemon
      // forgets it when another enrolment starts); nothing changed yet.
      const cancel = h('button', { type: 'button', class: 'secondary' }, 'Cancel');
      cancel.addEventListener('click', () => { clear(extra); enroll.focus(); });
      confirm.submit.after(cancel);
      clear(extra, h('div', { class: 'enroll' },
        h('h3', null, 'New device'),
        h('p', null, 'Scan this code with an authenticator app, or enter the secret by hand, then confirm with a code.'),
        h('img', { class: 'qr', src: e.qr_data_url, alt: 'QR code of the new two-factor secret' }),
        h('p', null, 'Secret, to type into the app by hand (the spaces are only for reading):'),
        copyBox(e.secret, 'Copy the secret', 'secret', e.secret.replace(/=+$/, '').replace(/(.{4})(?=.)/g, '$1 ')),
        confirm.form));
      code.input.focus();
    }));
    // A passkey (this device's, a security key, a phone) is a device too.
    const pkName = field('Passkey name', { type: 'text', name: 'passkey_name', placeholder: 'Passkey', maxlength: 64, autocomplete: 'off' });
    const addPk = form({ label: 'Add a passkey', submit: 'Add a passkey', className: 'inline' }, [pkName.row], async (pn) => {
      const r = await addPasskey<Message & { backup_codes?: string[] }>(api, pkName.input.value.trim());
      clear(codesBox, r.backup_codes?.length ? backupCodesBox(r.backup_codes) : null);
      pn.ok(r.message);
      n.ok(r.message || 'Passkey added.');
      pkName.input.value = '';
      await load();
    });
    // Passwordless sign-in, once a passkey is enrolled.
    const hasPasskey = (s.devices ?? []).some((d) => d.type === 'passkey');
    let alone: HTMLElement | null = null;
    if (hasPasskey) {
      const st = await api.get<AuthStatus>('/api/auth/status');
      const box = checkbox('Sign in with a passkey alone (no password). The password stays the way back in, with the backup codes.');
      box.input.checked = !!st.passkey_login;
      box.input.addEventListener('change', () => void busy([], n, async () => {
        try {
          n.ok((await api.put<Message>('/api/auth/passkeys/passwordless', { on: box.input.checked })).message);
        } catch (e) {
          box.input.checked = !box.input.checked;
          throw e;
        }
      }));
      alone = h('div', { class: 'passwordless' }, box.row);
    }
    const parts: Node[] = [
      h('p', null, 'Status: ', badge(s.enabled ? 'on' : 'off', s.enabled ? 'good' : 'warn'),
        s.enabled ? ` · ${s.backup_codes_remaining} backup codes left` : ''),
      devices, h('div', { class: 'actions' }, enroll),
      addPk.form, ...(alone ? [alone] : []),
      // The new-device form opens here, under its button, above Turn off.
      extra,
    ];
    if (s.enabled) {
      const regen = h('button', { type: 'button', class: 'secondary' }, 'Issue new backup codes');
      regen.addEventListener('click', () => void ask({
        title: 'Issue new backup codes?', body: h('p', null, 'The codes you have now stop working.'),
        confirm: 'Issue new codes', code: CODE,
        action: async (code) => {
          const r = await api.post<{ backup_codes: string[]; message: string }>('/api/auth/2fa/backup-codes/regenerate', { code });
          clear(codesBox, backupCodesBox(r.backup_codes));
          await load();
        },
      }));
      const off = h('button', { type: 'button', class: 'danger' }, 'Turn off two-factor authentication');
      off.addEventListener('click', () => void ask({
        title: 'Turn off two-factor authentication?',
        body: h('p', null, 'Every device and backup code is removed; the password alone will open this dashboard.'),
        confirm: 'Turn off 2FA', danger: true, code: CODE,
        action: async (code) => {
          n.ok((await api.post<Message>('/api/auth/2fa/disable', { code })).message);
          clear(extra);
          clear(codesBox);
          dismiss('backup-codes');
          await load();
        },
      }));
      (parts[2] as HTMLElement).append(regen);
      parts.push(h('h3', null, 'Turn off'), h('p', null, 'Without 2FA the password alone opens this dashboard.'), h('div', { class: 'actions' }, off));
    }
    refill(body, parts);
  });
  const kept = getSecret('backup-codes');
  if (kept) codesBox.append(backupCodesBox(kept.data.codes as string[]));
  void load();
  return card('Devices and backup codes', n.el, codesBox, body);
}
