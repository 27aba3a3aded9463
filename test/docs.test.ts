// The Markdown files point only at what the repository has: every relative link at a file (and, into a Markdown
// file, at one of its headings), every contracts/ file named at one that is kept, every tag linked at one that exists.
import { execFileSync } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { dirname, join, normalize } from 'node:path'
import t from 'tap'

const git = (...args: string[]): string[] => execFileSync('git', args, { encoding: 'utf8' }).split('\n').filter((line) => line !== '')
const markdown = git('ls-files', '*.md')
const tags = new Set(git('tag', '--list'))

// GitHub's anchor for a heading: lower case, punctuation but hyphens dropped, each space a hyphen.
const slug = (heading: string): string => heading.trim().toLowerCase().replace(/[^\p{L}\p{N}\- ]/gu, '').replaceAll(' ', '-')

const anchorsOf = (file: string): Set<string> =>
  new Set(readFileSync(file, 'utf8').split('\n').filter((line) => /^#{1,6} /.test(line)).map((line) => slug(line.replace(/^#+ /, ''))))

/** Inline links, `[text](target)`, and reference definitions, `[label]: target`, whatever their target. */
function linksOf (text: string): string[] {
  const inline = [...text.matchAll(/\]\(([^)\s]+)\)/g)].map(([, target = '']) => target)
  const references = [...text.matchAll(/^\[[^\]]+\]: (\S+)$/gm)].map(([, target = '']) => target)
  return [...inline, ...references]
}

t.test('Markdown files', async (t) => {
  t.ok(markdown.length >= 10, `${markdown.length} files`)
  for (const file of markdown) {
    const text = readFileSync(file, 'utf8')
    for (const link of linksOf(text)) {
      if (/^(https?|mailto):/.test(link)) {
        const tag = /\/(?:releases\/tag\/|compare\/)(v[^./]+\.[^./]+\.[^./]+)/.exec(link)?.[1]
        if (tag !== undefined) t.ok(tags.has(tag), `${file}: ${link} names tag ${tag}, which the repository has`)
        continue
      }
      const [path = '', anchor] = link.split('#')
      const target = path === '' ? file : normalize(join(dirname(file), path))
      t.ok(existsSync(target), `${file}: ${link} is a file of the repository`)
      if (anchor !== undefined && target.endsWith('.md') && existsSync(target)) {
        t.ok(anchorsOf(target).has(anchor), `${file}: ${link} is a heading of ${target}`)
      }
    }
    for (const [name] of text.matchAll(/(?<![\w/])contracts\/[\w.-]+\.yaml/g)) t.ok(existsSync(name), `${file}: ${name} is kept`)
  }
})
