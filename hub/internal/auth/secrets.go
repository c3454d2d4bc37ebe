package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"fmt"
	"strings"

	"kollect.dev/hub/internal/store"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// Secret prefixes tell a leaked string's kind at a glance (and to secret scanners).
const (
	PrefixBootstrap = "kbt_"
	PrefixAgent     = "kag_"
	PrefixAPI       = "kat_"
)

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// NewSecret returns a random secret with 256 bits of entropy and its hash. Because the secret
// is uniformly random, a plain SHA-256 is enough to store it: there is nothing to brute-force.
func NewSecret(prefix string) (secret, hash string, err error) {
	var buf [32]byte
	if _, err := rand.Read(buf[:]); err != nil {
		return "", "", fmt.Errorf("generating secret: %w", err)
	}
	secret = prefix + strings.ToLower(b32.EncodeToString(buf[:]))
	return secret, Hash(secret), nil
}

// Hash is the stored form of a secret.
func Hash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// NewID returns a short random identifier for token listings.
func NewID() (string, error) {
	var buf [6]byte
	if _, err := rand.Read(buf[:]); err != nil {
		return "", fmt.Errorf("generating id: %w", err)
	}
	return hex.EncodeToString(buf[:]), nil
}

// RoleToProto and RoleFromProto convert roles between the store and the protocol.
func RoleToProto(r store.Role) fleetv1.Role {
	switch r {
	case store.RoleViewer:
		return fleetv1.Role_ROLE_VIEWER
	case store.RoleOperator:
		return fleetv1.Role_ROLE_OPERATOR
	case store.RoleAdmin:
		return fleetv1.Role_ROLE_ADMIN
	}
	return fleetv1.Role_ROLE_UNSPECIFIED
}

// RoleFromProto returns false for an unspecified or unknown role.
func RoleFromProto(r fleetv1.Role) (store.Role, bool) {
	switch r {
	case fleetv1.Role_ROLE_VIEWER:
		return store.RoleViewer, true
	case fleetv1.Role_ROLE_OPERATOR:
		return store.RoleOperator, true
	case fleetv1.Role_ROLE_ADMIN:
		return store.RoleAdmin, true
	}
	return 0, false
}

// RoleName is the lower-case name used in messages and flags.
func RoleName(r store.Role) string {
	switch r {
	case store.RoleViewer:
		return "viewer"
	case store.RoleOperator:
		return "operator"
	case store.RoleAdmin:
		return "admin"
	}
	return fmt.Sprintf("role(%d)", int(r))
}
