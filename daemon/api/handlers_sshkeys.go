package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/gorilla/mux"

	"github.com/tunnelsvc/tunnelsvc/daemon/sshkeys"
	"github.com/tunnelsvc/tunnelsvc/daemon/totp"
)

// sshKeyError maps the key service's errors: operator errors 400 (spec
// §4.2 answers 400 for an unknown id on delete and default), the rest 500.
func sshKeyError(err error, what string) error {
	var ke *sshkeys.Error
	if errors.As(err, &ke) {
		return Errorf(http.StatusBadRequest, "%s", ke.Error())
	}
	return Internal(what, err)
}

func (s *Server) sshKeysList(w http.ResponseWriter, r *http.Request) error {
	keys, err := s.sshkeys.List(r.Context())
	if err != nil {
		return Internal("could not list the SSH keys", err)
	}
	writeData(w, http.StatusOK, keys)
	return nil
}

func (s *Server) sshKeysGenerate(w http.ResponseWriter, r *http.Request) error {
	var body sshkeys.GenerateRequest
	if err := decodeOptional(r, &body); err != nil {
		return err
	}
	k, err := s.sshkeys.Generate(r.Context(), client(r), body)
	if err != nil {
		return sshKeyError(err, "could not generate the key")
	}
	writeData(w, http.StatusOK, k)
	return nil
}

func (s *Server) sshKeysUpload(w http.ResponseWriter, r *http.Request) error {
	var body sshkeys.UploadRequest
	if err := decode(r, &body); err != nil {
		return err
	}
	k, err := s.sshkeys.Upload(r.Context(), client(r), body)
	if err != nil {
		return sshKeyError(err, "could not store the key")
	}
	writeData(w, http.StatusOK, k)
	return nil
}

func (s *Server) sshKeyDelete(w http.ResponseWriter, r *http.Request) error {
	if err := s.sshkeys.Delete(r.Context(), client(r), mux.Vars(r)["id"]); err != nil {
		return sshKeyError(err, "could not delete the key")
	}
	writeData(w, http.StatusOK, message("key deleted"))
	return nil
}

func (s *Server) sshKeySetDefault(w http.ResponseWriter, r *http.Request) error {
	if err := s.sshkeys.SetDefault(r.Context(), client(r), mux.Vars(r)["id"]); err != nil {
		return sshKeyError(err, "could not change the default key")
	}
	writeData(w, http.StatusOK, message("default key changed"))
	return nil
}

// downloadName is the attachment's file name (spec §4.2), whatever the type.
const downloadName = "tunnel_id_rsa"

// sshKeyDownload: spec §4.2 POST /api/local/ssh-keys/{id}/download, §5.5.
// The key must exist before the challenge is checked, so a code is not
// spent on a typo in the id.
func (s *Server) sshKeyDownload(w http.ResponseWriter, r *http.Request) error {
	var body totp.Challenge
	if err := decode(r, &body); err != nil {
		return err
	}
	id := mux.Vars(r)["id"]
	key, err := s.sshkeys.Get(r.Context(), id)
	if errors.Is(err, sshkeys.ErrNotFound) {
		return Errorf(http.StatusNotFound, "key not found")
	} else if err != nil {
		return Internal("could not read the key", err)
	}
	if err := s.withRP(r, &body); err != nil {
		return err
	}
	c := client(r)
	// The audit log names the key, as every other key entry does.
	if err := s.totp.StepUp(r.Context(), c, body, fmt.Sprintf("download SSH key %q (%s)", key.Name, id)); err != nil {
		return twoFAError(w, err, http.StatusUnauthorized)
	}
	pemText, err := s.sshkeys.Download(r.Context(), c, id)
	if errors.Is(err, sshkeys.ErrNotFound) {
		return Errorf(http.StatusNotFound, "key not found")
	}
	if err != nil {
		return Internal("could not read the key", err)
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", "attachment; filename="+downloadName)
	h.Set("Content-Length", strconv.Itoa(len(pemText)))
	w.WriteHeader(http.StatusOK)
	w.Write(pemText)
	return nil
}
