package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble"
)

// PutAnchor stores the anchor of a.ResponseID and points the scope
// (a.ScopeKind, a.ScopeID) at it, in one batch committed with pebble.Sync:
// when PutAnchor returns nil both are durable. A zero CreatedAt becomes the
// store's clock and a zero ExpiresAt becomes CreatedAt + AnchorTTL. The scope
// record is stamped with the store's clock and lives ScopeTTL; when several
// anchors of one scope are put concurrently, the last commit wins.
//
// Putting the same response id again replaces its anchor.
func (s *PebbleStore) PutAnchor(ctx context.Context, a Anchor) error {
	return s.putAnchor(ctx, a, false)
}

// ReplaceAnchor is PutAnchor that writes only over a live anchor of
// a.ResponseID: ErrNotFound when there is none.
func (s *PebbleStore) ReplaceAnchor(ctx context.Context, a Anchor) error {
	return s.putAnchor(ctx, a, true)
}

func (s *PebbleStore) putAnchor(ctx context.Context, a Anchor, replace bool) (err error) {
	if err := validAnchor(&a); err != nil {
		return fmt.Errorf("store: put anchor: %w", err)
	}
	now := s.now()
	if a.CreatedAt.IsZero() {
		a.CreatedAt = now
	}
	if a.ExpiresAt.IsZero() {
		a.ExpiresAt = a.CreatedAt.Add(s.opts.AnchorTTL)
	}
	scope := ScopeRecord{
		LatestResponseID: a.ResponseID,
		Owner:            a.Upstream,
		UpdatedAt:        now,
		ExpiresAt:        now.Add(s.opts.ScopeTTL),
	}

	acquire := s.begin
	if replace {
		// Exclusive: the check and the write must not interleave with a
		// DeleteAnchor.
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("store: put anchor %s: %w", RedactID(a.ResponseID), err)
		}
		acquire = func(context.Context) (*pebble.DB, func(*error), error) { return s.acquireExclusive() }
	}
	db, release, err := acquire(ctx)
	if err != nil {
		return fmt.Errorf("store: put anchor %s: %w", RedactID(a.ResponseID), err)
	}
	defer release(&err)
	if replace {
		cur, err := loadAnchor(db, a.ResponseID)
		if err == nil && expired(cur.ExpiresAt, now) {
			err = ErrNotFound
		}
		if errors.Is(err, ErrNotFound) {
			return fmt.Errorf("store: replace anchor %s: %w", RedactID(a.ResponseID), err)
		}
	}

	ak, sk := anchorKey(a.ResponseID), scopeKey(a.ScopeKind, a.ScopeID)
	b := db.NewBatch()
	defer b.Close()
	for _, kv := range [...]struct{ k, v []byte }{
		{ak, encodeAnchor(&a)},
		{expiryKey(a.ExpiresAt, ak), nil},
		{sk, encodeScope(&scope)},
		{expiryKey(scope.ExpiresAt, sk), nil},
	} {
		if err := b.Set(kv.k, kv.v, nil); err != nil {
			return fmt.Errorf("store: put anchor %s: %w", RedactID(a.ResponseID), err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("store: put anchor %s: commit: %w", RedactID(a.ResponseID), err)
	}
	s.stats.anchorsWritten.Add(1)
	if s.log.IsTrace() {
		s.log.Trace("anchor stored", "response", RedactID(a.ResponseID), "upstream", a.Upstream,
			"scope_kind", a.ScopeKind.String(), "scope", RedactID(a.ScopeID))
	}
	return nil
}

func validAnchor(a *Anchor) error {
	if err := validID("response id", a.ResponseID); err != nil {
		return err
	}
	if !a.ScopeKind.Valid() {
		return fmt.Errorf("%v: %w", a.ScopeKind, ErrInvalid)
	}
	if err := validID("scope id", a.ScopeID); err != nil {
		return err
	}
	if a.Upstream == "" {
		return fmt.Errorf("empty upstream: %w", ErrInvalid)
	}
	if len(a.UpstreamID) > MaxIDLen {
		return fmt.Errorf("upstream id of %d bytes exceeds %d: %w", len(a.UpstreamID), MaxIDLen, ErrInvalid)
	}
	if len(a.Earlier) > MaxEarlierCopies {
		return fmt.Errorf("%d earlier copies exceed %d: %w", len(a.Earlier), MaxEarlierCopies, ErrInvalid)
	}
	for _, c := range a.Earlier {
		if c.Upstream == "" {
			return fmt.Errorf("earlier copy without an upstream: %w", ErrInvalid)
		}
		if len(c.ID) > MaxIDLen {
			return fmt.Errorf("earlier copy id of %d bytes exceeds %d: %w", len(c.ID), MaxIDLen, ErrInvalid)
		}
	}
	return nil
}

// GetAnchor loads the anchor of responseID. It returns an error wrapping
// ErrNotFound when there is none or it has expired (swept or not).
func (s *PebbleStore) GetAnchor(ctx context.Context, responseID string) (_ Anchor, err error) {
	if err := validID("response id", responseID); err != nil {
		return Anchor{}, fmt.Errorf("store: get anchor: %w", err)
	}
	db, release, err := s.begin(ctx)
	if err != nil {
		return Anchor{}, fmt.Errorf("store: get anchor %s: %w", RedactID(responseID), err)
	}
	defer release(&err)
	s.stats.anchorLookups.Add(1)

	a, err := loadAnchor(db, responseID)
	if err == nil && expired(a.ExpiresAt, s.now()) {
		err = ErrNotFound
	}
	if err != nil {
		return Anchor{}, fmt.Errorf("store: get anchor %s: %w", RedactID(responseID), err)
	}
	s.stats.anchorHits.Add(1)
	return a, nil
}

// loadAnchor reads an anchor whether or not it has expired; ErrNotFound if
// absent.
func loadAnchor(db *pebble.DB, responseID string) (Anchor, error) {
	var a Anchor
	err := get(db, anchorKey(responseID), func(v []byte) (err error) {
		a, err = decodeAnchor(responseID, v)
		return err
	})
	if errors.Is(err, pebble.ErrNotFound) {
		return Anchor{}, ErrNotFound
	}
	return a, err
}

// loadScope reads a scope record whether or not it has expired; ErrNotFound
// if absent.
func loadScope(db *pebble.DB, key []byte) (ScopeRecord, error) {
	var r ScopeRecord
	err := get(db, key, func(v []byte) (err error) {
		r, err = decodeScope(v)
		return err
	})
	if errors.Is(err, pebble.ErrNotFound) {
		return ScopeRecord{}, ErrNotFound
	}
	return r, err
}

// DeleteAnchor removes the anchor of responseID, expired or not, and the
// scope record of its scope if that points at responseID (a scope that has
// moved on to a newer response keeps it). Deleting an absent anchor is not
// an error. The deletion is synced.
func (s *PebbleStore) DeleteAnchor(ctx context.Context, responseID string) (err error) {
	if err := validID("response id", responseID); err != nil {
		return fmt.Errorf("store: delete anchor: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("store: delete anchor %s: %w", RedactID(responseID), err)
	}
	// Exclusive: the scope check and the deletion must not interleave with
	// a PutAnchor that moves the scope to another response.
	db, release, err := s.acquireExclusive()
	if err != nil {
		return fmt.Errorf("store: delete anchor %s: %w", RedactID(responseID), err)
	}
	defer release(&err)

	a, err := loadAnchor(db, responseID)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	b := db.NewBatch()
	defer b.Close()
	if err != nil {
		// Undecodable: remove the anchor, leave the scope alone.
		s.log.Warn("deleting undecodable anchor", "response", RedactID(responseID), "error", err)
	} else {
		sk := scopeKey(a.ScopeKind, a.ScopeID)
		r, err := loadScope(db, sk)
		switch {
		case err == nil && r.LatestResponseID == responseID:
			if err := b.Delete(sk, nil); err != nil {
				return fmt.Errorf("store: delete anchor %s: %w", RedactID(responseID), err)
			}
		case err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrCorrupt):
			return fmt.Errorf("store: delete anchor %s: read scope: %w", RedactID(responseID), err)
		}
	}
	if err := b.Delete(anchorKey(responseID), nil); err != nil {
		return fmt.Errorf("store: delete anchor %s: %w", RedactID(responseID), err)
	}
	// The expiry index entries are left behind; the sweeper drops them
	// when they come due and find no record.
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("store: delete anchor %s: commit: %w", RedactID(responseID), err)
	}
	s.stats.anchorsDeleted.Add(1)
	return nil
}

// GetScope loads the scope record of (kind, id). It returns an error
// wrapping ErrNotFound when there is none or it has expired.
func (s *PebbleStore) GetScope(ctx context.Context, kind ScopeKind, id string) (_ ScopeRecord, err error) {
	if !kind.Valid() {
		return ScopeRecord{}, fmt.Errorf("store: get scope: %v: %w", kind, ErrInvalid)
	}
	if err := validID("scope id", id); err != nil {
		return ScopeRecord{}, fmt.Errorf("store: get scope: %w", err)
	}
	db, release, err := s.begin(ctx)
	if err != nil {
		return ScopeRecord{}, fmt.Errorf("store: get scope %s %s: %w", kind, RedactID(id), err)
	}
	defer release(&err)
	s.stats.scopeLookups.Add(1)

	r, err := loadScope(db, scopeKey(kind, id))
	if err == nil && expired(r.ExpiresAt, s.now()) {
		err = ErrNotFound
	}
	if err != nil {
		return ScopeRecord{}, fmt.Errorf("store: get scope %s %s: %w", kind, RedactID(id), err)
	}
	return r, nil
}
