package totp

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/audit"
	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// checkManagementCode verifies the code that a change to 2FA itself needs
// (any device or a backup code) and spends it. A wrong code counts in the
// rate limit: a stolen session must not be able to guess its way to
// turning 2FA off. exclude names a device whose own code is refused.
func (s *Service) checkManagementCode(ctx context.Context, c auth.Client, code, action, exclude string) (match, error) {
	res, err := s.auth.Reserve(ctx, c)
	if err != nil {
		return match{}, err
	}
	m, err := s.find(ctx, c, code, true)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			return match{}, s.fail(ctx, c, KindStepUpFailed, action, err)
		}
		res.Release()
		return match{}, err
	}
	if exclude != "" && !m.isBackup() && m.device.ID == exclude {
		res.Release()
		return match{}, ErrOwnDevice
	}
	if err := s.use(ctx, m); err != nil {
		if errors.Is(err, ErrCodeReused) {
			return match{}, s.fail(ctx, c, KindStepUpFailed, action, err)
		}
		res.Release()
		return match{}, err
	}
	res.Release()
	if m.isBackup() {
		s.record(ctx, c, KindBackupCodeUsed, action)
	}
	return m, nil
}

// Disable removes every device and backup code after checking code.
func (s *Service) Disable(ctx context.Context, c auth.Client, code string) error {
	if strings.TrimSpace(code) == "" {
		return ErrCodeRequired
	}
	if on, err := s.Enabled(ctx); err != nil {
		return err
	} else if !on {
		return ErrNotEnabled
	}
	if _, err := s.checkManagementCode(ctx, c, code, "disable 2FA", ""); err != nil {
		return err
	}
	if _, err := s.st.DisableTOTP(ctx); err != nil {
		return err
	}
	s.record(ctx, c, KindDisabled, "")
	return s.passkeysGone(ctx, c)
}

// ForceDisable is root's recovery on the box (lost phone): it turns 2FA off
// without a code and reports how many devices were removed.
func (s *Service) ForceDisable(ctx context.Context) (int, error) {
	n, err := s.st.DisableTOTP(ctx)
	if err != nil {
		return 0, err
	}
	s.audit.Record(ctx, audit.Event{Kind: KindDisabled, Detail: fmt.Sprintf("disabled from the command line (disable-2fa); %d device(s) removed", n)})
	return n, s.passkeysGone(ctx, auth.Client{})
}

// RemoveDevice removes device id after checking a code from another device
// or a backup code. Removing the last device turns 2FA off.
func (s *Service) RemoveDevice(ctx context.Context, c auth.Client, id, code string) error {
	id = strings.TrimSpace(id)
	if id == "" {
		return ErrDeviceIDRequired
	}
	if strings.TrimSpace(code) == "" {
		return ErrCodeRequired
	}
	st, err := s.Status(ctx)
	if err != nil {
		return err
	}
	name, kind, found := "", "", false
	for _, d := range st.Devices {
		if d.ID == id {
			name, kind, found = d.Name, d.Type, true
		}
	}
	if !found {
		return ErrDeviceNotFound
	}
	if _, err := s.checkManagementCode(ctx, c, code, "remove device "+id, id); err != nil {
		return err
	}
	var lastGone bool
	if kind == "passkey" {
		lastGone, err = s.st.DeletePasskey(ctx, id)
	} else {
		lastGone, err = s.st.DeleteTOTPDevice(ctx, id)
	}
	if errors.Is(err, store.ErrNotFound) {
		return ErrDeviceNotFound
	}
	if err != nil {
		return err
	}
	s.record(ctx, c, KindDeviceRemoved, fmt.Sprintf("device %q (%s)", name, id))
	if lastGone {
		s.record(ctx, c, KindDisabled, "the last device was removed")
	}
	return s.passkeysGone(ctx, c)
}

// RegenerateBackupCodes replaces the backup codes after checking code and
// returns the new set, once.
func (s *Service) RegenerateBackupCodes(ctx context.Context, c auth.Client, code string) ([]string, error) {
	if strings.TrimSpace(code) == "" {
		return nil, ErrCodeRequired
	}
	if on, err := s.Enabled(ctx); err != nil {
		return nil, err
	} else if !on {
		return nil, ErrNotEnabled
	}
	if _, err := s.checkManagementCode(ctx, c, code, "regenerate backup codes", ""); err != nil {
		return nil, err
	}
	plain, hashes, err := s.newBackupCodes(ctx, c)
	if err != nil {
		return nil, err
	}
	if err := s.st.ReplaceBackupCodes(ctx, hashes, s.now()); err != nil {
		return nil, err
	}
	s.record(ctx, c, KindBackupRegenerated, "")
	return plain, nil
}
