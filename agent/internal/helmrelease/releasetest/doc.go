// Package releasetest gives tests of other packages the release Secret helm wrote, the
// fixture package helmrelease decodes in its own tests, as a Secret ready to create.
package releasetest
