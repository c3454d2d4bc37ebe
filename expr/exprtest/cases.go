// Package exprtest holds the table of good and bad expressions that every compiler of Kollect
// expressions is tested against: the expr package itself, the agent's profile compiler and
// the hub's bundle validation. One table applied to each is what shows they agree.
package exprtest

// Use is where an expression appears in a Kollect object.
type Use string

// The places expressions appear.
const (
	// AttributeCEL is a KollectProfile attribute's cel.
	AttributeCEL Use = "attribute.cel"
	// AttributeJSONPath is a KollectProfile attribute's jsonPath.
	AttributeJSONPath Use = "attribute.jsonPath"
	// Match is a target's spec.match (KollectTarget, KollectClusterTarget).
	Match Use = "match"
)

// Case is one expression and the verdict every compiler must reach.
type Case struct {
	Name string
	Use  Use
	Expr string
	// Refused is "" when the expression compiles, else a substring of the refusal's detail.
	Refused string
}

// costly nests six maps over ten-element literals: a million steps on every object, whatever
// the object holds.
const costly = "[1,2,3,4,5,6,7,8,9,10].map(a, [1,2,3,4,5,6,7,8,9,10].map(b, [1,2,3,4,5,6,7,8,9,10].map(c, " +
	"[1,2,3,4,5,6,7,8,9,10].map(d, [1,2,3,4,5,6,7,8,9,10].map(e, [1,2,3,4,5,6,7,8,9,10].map(f, a+b+c+d+e+f)))))).size()"

// Cases is the table. Keep it small and pointed: each entry is a rule of the environment.
var Cases = []Case{
	// CEL attributes that compile: the Kubernetes libraries, the strings extension, optionals.
	{Name: "field", Use: AttributeCEL, Expr: "object.spec.replicas"},
	{Name: "lists library", Use: AttributeCEL, Expr: "object.spec.template.spec.containers.map(c, c.image).isSorted()"},
	{Name: "quantity library", Use: AttributeCEL, Expr: "quantity(object.spec.limits.memory).asInteger()"},
	{Name: "regex library", Use: AttributeCEL, Expr: "object.metadata.name.find('[0-9]+')"},
	{Name: "url library", Use: AttributeCEL, Expr: "url(object.spec.endpoint).getHost()"},
	{Name: "ip library", Use: AttributeCEL, Expr: "ip(object.status.podIP).family()"},
	{Name: "cidr library", Use: AttributeCEL, Expr: "cidr('10.0.0.0/8').containsIP(object.status.podIP)"},
	{Name: "strings extension", Use: AttributeCEL, Expr: "object.metadata.name.upperAscii().split('-')"},
	{Name: "optional field", Use: AttributeCEL, Expr: "object.?metadata.labels.team.orValue('none')"},
	{Name: "data-dependent cost", Use: AttributeCEL, Expr: "object.spec.items.map(a, object.spec.items.map(b, a + b)).size()"},

	// CEL attributes that do not.
	{Name: "syntax error", Use: AttributeCEL, Expr: "object.spec.replicas +", Refused: "<input>:1:23"},
	{Name: "undeclared variable", Use: AttributeCEL, Expr: "self.spec.replicas", Refused: "undeclared reference to 'self'"},
	{Name: "type error", Use: AttributeCEL, Expr: "1 + 'a'", Refused: "no matching overload"},
	{Name: "unknown function", Use: AttributeCEL, Expr: "object.metadata.name.shout()", Refused: "undeclared reference to 'shout'"},
	{Name: "mixed list literal", Use: AttributeCEL, Expr: "[1, 'a']", Refused: "expected type 'int' but found 'string'"},
	{Name: "over budget on every object", Use: AttributeCEL, Expr: costly, Refused: "exceeds the budget of 1000000"},

	// Matches: a boolean, or dyn (checked on evaluation).
	{Name: "bool match", Use: Match, Expr: "object.spec.replicas > 0"},
	{Name: "dyn match", Use: Match, Expr: "object.metadata.labels.enabled"},
	{Name: "match with library", Use: Match, Expr: "object.metadata.name.matches('^web-')"},
	{Name: "string match", Use: Match, Expr: "'yes'", Refused: "must return bool, not string"},
	{Name: "int match", Use: Match, Expr: "size(object.metadata.name)", Refused: "must return bool, not int"},
	{Name: "match syntax error", Use: Match, Expr: "object.metadata.labels['a'] ==", Refused: "<input>:1:"},
	{Name: "match type error", Use: Match, Expr: "object.spec.replicas > 'a' && 1 == 'b'", Refused: "no matching overload"},
	{Name: "match over budget", Use: Match, Expr: costly + " > 0", Refused: "exceeds the budget of 1000000"},

	// JSONPath attributes.
	{Name: "braced path", Use: AttributeJSONPath, Expr: "{.spec.replicas}"},
	{Name: "bare path", Use: AttributeJSONPath, Expr: ".metadata.name"},
	{Name: "wildcard", Use: AttributeJSONPath, Expr: "{.spec.template.spec.containers[*].image}"},
	{Name: "filter", Use: AttributeJSONPath, Expr: `{.spec.containers[?(@.name=="app")].image}`},
	{Name: "recursive descent", Use: AttributeJSONPath, Expr: "{..image}"},
	{Name: "unclosed bracket", Use: AttributeJSONPath, Expr: "{.spec.replicas[}", Refused: "unterminated array"},
	{Name: "unclosed action", Use: AttributeJSONPath, Expr: "{.spec.replicas", Refused: "unclosed action"},
	{Name: "bad filter", Use: AttributeJSONPath, Expr: "{.items[?(@.a==)]}", Refused: "unrecognized character in action"},
}
