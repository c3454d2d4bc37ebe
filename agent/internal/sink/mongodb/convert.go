package mongodb

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"

	"go.mongodb.org/mongo-driver/v2/bson"

	"kollect.dev/agent/internal/export"
)

// toBSON turns a canonical JSON object into an ordered BSON document. Integers become int64
// (so they stay exact), other numbers float64; key order is kept, so documents read back in
// the canonical order.
func toBSON(raw json.RawMessage) (bson.D, error) {
	if len(raw) == 0 {
		return bson.D{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, err
	}
	d, ok := v.(bson.D)
	if !ok {
		return nil, fmt.Errorf("attributes are not a JSON object")
	}
	return d, nil
}

func decodeValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			d := bson.D{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				d = append(d, bson.E{Key: k.(string), Value: v})
			}
			_, err := dec.Token() // '}'
			return d, err
		case '[':
			a := bson.A{}
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			_, err := dec.Token() // ']'
			return a, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i, nil
		}
		f, err := t.Float64()
		if err != nil {
			return nil, err
		}
		return f, nil
	default: // string, bool, nil
		return t, nil
	}
}

// fromBSON turns a stored attributes document back into canonical JSON.
func fromBSON(d bson.D) (json.RawMessage, error) {
	v, err := plain(d)
	if err != nil {
		return nil, err
	}
	return export.EncodeAttributes(v.(map[string]any))
}

// plain converts decoded BSON into the Go values encoding/json writes canonically.
func plain(v any) (any, error) {
	switch t := v.(type) {
	case bson.D:
		m := make(map[string]any, len(t))
		for _, e := range t {
			pv, err := plain(e.Value)
			if err != nil {
				return nil, err
			}
			m[e.Key] = pv
		}
		return m, nil
	case bson.A:
		out := make([]any, len(t))
		for i := range t {
			pv, err := plain(t[i])
			if err != nil {
				return nil, err
			}
			out[i] = pv
		}
		return out, nil
	case int32:
		return int64(t), nil
	case float64:
		if math.IsInf(t, 0) || math.IsNaN(t) {
			return nil, fmt.Errorf("attribute value %v has no JSON form", t)
		}
		return t, nil
	case int64, string, bool, nil:
		return t, nil
	case bson.DateTime:
		return t.Time().UTC(), nil
	default:
		return nil, fmt.Errorf("attribute value of type %T has no canonical JSON form", v)
	}
}

// rowID is the document _id: the row's identity key.
func rowID(r *export.Row) string { return r.Key().String() }

// stateID is the _id of a (cluster, inventory) state document.
func stateID(cluster, inventory string) string { return cluster + "/" + inventory }

// digest is the row's content digest as stored in documents, compared by full reconciles.
func digest(r *export.Row) string {
	d := r.Digest()
	return hex.EncodeToString(d[:])
}

// rowFields are the identity and content fields of a row document, without _id and times.
func rowFields(r *export.Row) (bson.D, error) {
	attrs, err := toBSON(r.Attributes)
	if err != nil {
		return nil, fmt.Errorf("attributes of %s: %w", r.Key(), err)
	}
	return bson.D{
		{Key: "cluster", Value: r.Cluster}, {Key: "inventory", Value: r.Inventory}, {Key: "target", Value: r.Target},
		{Key: "api_group", Value: r.Group}, {Key: "version", Value: r.Version}, {Key: "kind", Value: r.Kind},
		{Key: "namespace", Value: r.Namespace}, {Key: "name", Value: r.Name}, {Key: "uid", Value: r.UID},
		{Key: "profile", Value: r.Profile}, {Key: "profile_generation", Value: r.ProfileGeneration},
		{Key: "attributes", Value: attrs}, {Key: "digest", Value: digest(r)},
	}, nil
}
