package mongodb

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

// Probe pings the server (which authenticates) and reads the state collection, so missing
// credentials or read privileges show up before the first export. It writes nothing; write
// privileges are only proven by an export, which fails terminally without them.
func (s *Sink) Probe(ctx context.Context) error {
	if err := s.client.Ping(ctx, nil); err != nil {
		return classify(fmt.Errorf("mongodb sink %s: connecting: %w", s.dest, err))
	}
	if err := s.state.FindOne(ctx, bson.D{}, options.FindOne().SetProjection(bson.D{{Key: "_id", Value: 1}})).Err(); err != nil &&
		!errors.Is(err, mongo.ErrNoDocuments) {
		return classify(fmt.Errorf("mongodb sink %s: reading %s: %w", s.dest, s.state.Name(), err))
	}
	return nil
}

// Preview lists the commands an export of the inventory would run, with what the state
// collection holds for it now. It only reads.
func (s *Sink) Preview(ctx context.Context, cluster, inventory string) (sink.Preview, error) {
	p := sink.Preview{Destination: s.dest}
	db := s.rows.Database().Name()
	for _, ix := range indexes {
		keys, _ := bson.MarshalExtJSON(ix.keys, false, false)
		unique := ""
		if ix.unique {
			unique = ", unique: true"
		}
		p.Statements = append(p.Statements, fmt.Sprintf("db.getSiblingDB(%q).%s.createIndex(%s, {name: %q%s})",
			db, s.rows.Name(), keys, ix.name, unique))
	}
	for _, name := range legacyIndexes {
		p.Statements = append(p.Statements, fmt.Sprintf("db.getSiblingDB(%q).%s.dropIndex(%q)  // only where an earlier version made it",
			db, s.rows.Name(), name))
	}
	id := stateID(cluster, inventory)
	scope := fmt.Sprintf("cluster: %q, inventory: %q", cluster, inventory)
	p.Statements = append(p.Statements,
		fmt.Sprintf("db.%s.findOne({_id: %q})", s.state.Name(), id),
		fmt.Sprintf("db.%s.find({%s})", s.coverage.Name(), scope),
		fmt.Sprintf("db.%s.updateOne({_id: %q}, {$set: {pending: <checksum>}}, {upsert: true})", s.state.Name(), id),
		fmt.Sprintf("db.%s.find({%s, gen_end: {$exists: false}, uid: {$in: [the diff's uids]}}, {_id: 1, target: 1, uid: 1, digest: 1, first_seen: 1})  // the whole inventory on a full reconcile",
			s.rows.Name(), scope),
		fmt.Sprintf("db.%s.bulkWrite([insertOne({_id: \"%s/<target>/<uid>@<generation>\", …, gen: <generation>, first_seen, updated_at}), …, updateMany({_id: {$in: [ended versions]}, %s}, {$set: {gen_end: <generation>}})], {ordered: false})",
			s.rows.Name(), id, scope),
		fmt.Sprintf("db.%s.bulkWrite([replaceOne({_id: \"%s/<target>\"}, {…, state, rows, extraction_errors, reason, updated_at}, {upsert: true}), deleteMany({_id: {$in: [targets no longer covered]}, %s})], {ordered: false})  // only when the coverage changed",
			s.coverage.Name(), id, scope),
		fmt.Sprintf("db.%s.updateOne({_id: %q}, {$set: {generation: <generation>, checksum, item_count, exported_at, dirty: true}, $unset: {pending: \"\"}})  // the switch", s.state.Name(), id),
		fmt.Sprintf("db.%s.deleteMany({%s, gen_end: {$lte: <generation>}})", s.rows.Name(), scope),
		fmt.Sprintf("db.%s.updateOne({_id: %q}, {$unset: {dirty: \"\"}})", s.state.Name(), id),
	)
	var st stateDoc
	switch err := s.state.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&st); {
	case errors.Is(err, mongo.ErrNoDocuments):
		p.Message = fmt.Sprintf("no export of %s/%s recorded: the next export is a full load", cluster, inventory)
	case err != nil:
		p.Message = fmt.Sprintf("database unreachable (%v): showing every command", err)
	case st.Pending != "":
		p.Message = fmt.Sprintf("an export of %s/%s was interrupted: the next export removes what it wrote first", cluster, inventory)
	default:
		p.Message = fmt.Sprintf("%s/%s holds %d rows at checksum %s: the next export applies a diff or nothing",
			cluster, inventory, st.ItemCount, export.ShortChecksum(st.Checksum))
	}
	return p, nil
}

// Server error codes that retrying cannot fix.
var terminalCodes = map[int]bool{
	2:     true, // BadValue
	9:     true, // FailedToParse
	13:    true, // Unauthorized
	18:    true, // AuthenticationFailed
	10334: true, // BSONObjectTooLarge
	17419: true, // document too large
	8000:  true, // Atlas authentication
}

// classify marks errors retrying cannot fix as terminal: authentication, authorisation,
// invalid documents, TLS verification. Network errors, timeouts, server selection and
// duplicate keys from a concurrent writer stay transient.
func classify(err error) error {
	if err == nil || sink.ClassOf(err) == sink.Terminal {
		return err
	}
	var srv mongo.ServerError
	if errors.As(err, &srv) {
		for _, c := range srv.ErrorCodes() {
			if terminalCodes[c] {
				return sink.TerminalError(err)
			}
		}
	}
	var unknownAuthority x509.UnknownAuthorityError
	var hostname x509.HostnameError
	if errors.As(err, &unknownAuthority) || errors.As(err, &hostname) {
		return sink.TerminalError(err)
	}
	// Authentication failing during the connection handshake surfaces as a connection error
	// whose message names it.
	if msg := err.Error(); strings.Contains(msg, "auth error") || strings.Contains(msg, "AuthenticationFailed") {
		return sink.TerminalError(err)
	}
	return sink.TransientError(err)
}
